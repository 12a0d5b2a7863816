//! Bounds on what one-off keys can keep alive: the least recently used entries go first, a
//! batch at a time.
//!
//! A table over its bound is trimmed to [`room_target`] at once, not by one entry per insert:
//! finding the oldest entries takes a pass over the table, and a pass per new key would make a
//! flood of one-off keys quadratic. Trimming a sixteenth at a time makes that pass cost about
//! sixteen entries per new key.

/// What a table bounded at `max` is trimmed to once it goes over: `max - max / 16`, and at
/// most `max - 1` so that a trim always makes room.
pub fn room_target(max: usize) -> usize {
    max.saturating_sub((max / 16).max(1))
}

/// Picks the `n` oldest of a set of times, one at a time in any order: `take(t)` says whether
/// the entry of time `t` is one of them. Ties at the cutoff are taken until `n` are.
pub struct Cutoff {
    cut: f64,
    /// Entries at exactly `cut` still to take.
    ties: usize,
}

impl Cutoff {
    /// The `n` oldest of `times` (all of them if there are no more than `n`).
    pub fn oldest(mut times: Vec<f64>, n: usize) -> Cutoff {
        if n == 0 || times.is_empty() {
            return Cutoff { cut: f64::NEG_INFINITY, ties: 0 };
        }
        if n >= times.len() {
            return Cutoff { cut: f64::INFINITY, ties: usize::MAX };
        }
        let (older, &mut cut, _) = times.select_nth_unstable_by(n - 1, f64::total_cmp);
        let below = older.iter().filter(|&&t| t < cut).count();
        Cutoff { cut, ties: n - below }
    }

    /// Whether the entry of time `t` is among the oldest (counting it if it ties the cutoff).
    pub fn take(&mut self, t: f64) -> bool {
        if t < self.cut {
            return true;
        }
        if t == self.cut && self.ties > 0 {
            self.ties -= 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(times: &[f64], n: usize) -> Vec<f64> {
        let mut cut = Cutoff::oldest(times.to_vec(), n);
        times.iter().copied().filter(|&t| cut.take(t)).collect()
    }

    #[test]
    fn takes_exactly_the_oldest_ties_included() {
        assert_eq!(taken(&[5.0, 1.0, 3.0, 2.0, 4.0], 2), vec![1.0, 2.0]);
        assert_eq!(taken(&[2.0, 1.0, 2.0, 2.0, 3.0], 3), vec![2.0, 1.0, 2.0]);
        assert_eq!(taken(&[1.0, 1.0, 1.0], 2).len(), 2);
        assert_eq!(taken(&[1.0, 2.0], 0), Vec::<f64>::new());
        assert_eq!(taken(&[1.0, 2.0], 5), vec![1.0, 2.0]);
        assert_eq!(taken(&[], 3), Vec::<f64>::new());
    }

    #[test]
    fn a_trim_always_makes_room() {
        assert_eq!(room_target(1), 0);
        assert_eq!(room_target(15), 14);
        assert_eq!(room_target(16), 15);
        assert_eq!(room_target(1_000_000), 937_500);
    }
}
