//! The file `Pool(state=...)` keeps: what an in-process pool knows that a restart must not
//! forget (health, cooldowns, pacing budgets, warm-up pairings, sessions), written atomically and read back.
//!
//! Exits are named by id only: the file holds no proxy URL and so no credential. Times are
//! stored as seconds relative to the save (remaining for what ends later, ages for what
//! happened before) together with the save's Unix time, so that the pool that resumes puts
//! them on its own clock and counts the time that passed while nothing ran.
//!
//! Each kind of state is a section of its own (a field of [`Saved`]); a section a later
//! version adds is one more field with `#[serde(default)]`, which older files simply lack.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// What the file says it is, so that another program's JSON is not taken for a pool's state.
pub const FORMAT: &str = "exitpool-state";
/// The file's layout; a file of a later version is refused (an event, a clean start).
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    pub format: String,
    pub version: u32,
    /// Unix time of the save: every relative time below counts from it.
    pub saved_at: f64,
    /// The ids of the pool's exits when saved (in service or not), in handle order: what
    /// tells this pool's file from another's, and how pairings find their exits.
    pub exits: Vec<String>,
    #[serde(default)]
    pub health: Vec<SavedBreaker>,
    #[serde(default)]
    pub cooldowns: Vec<SavedCooldown>,
    #[serde(default)]
    pub sessions: Vec<SavedSession>,
    #[serde(default)]
    pub pairings: Option<SavedPairings>,
    #[serde(default)]
    pub pacing: Vec<SavedPace>,
}

/// One breaker that is not plainly healthy (a tunnel's when `site` is `None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedBreaker {
    pub exit: String,
    #[serde(default)]
    pub site: Option<String>,
    /// "healthy", "degraded", "probing", "quarantined" or "dead".
    pub state: String,
    /// Seconds the quarantine had left at the save (0 for other states).
    #[serde(default)]
    pub remaining: f64,
    /// Ejections not yet forgiven: the next backoff grows from here.
    #[serde(default)]
    pub repeats: u32,
    #[serde(default)]
    pub failed_returns: u32,
}

/// An exit resting for a site after a 429 (site `None`: leases without a site).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedCooldown {
    pub exit: String,
    #[serde(default)]
    pub site: Option<String>,
    pub remaining: f64,
}

/// One (exit, site) budget that learned something: its rate, and when its next request fits
/// in relative time (a pair a site held off with `Retry-After` stays held off across a restart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPace {
    pub exit: String,
    pub site: String,
    /// Requests per second learned from the site's 429s.
    pub rate: f64,
    /// Seconds from the save until the pair's theoretical arrival time (negative: in the
    /// past; absent for a pair never spent).
    #[serde(default)]
    pub tat: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedSession {
    pub key: String,
    pub exit: String,
    /// The token generation of a gateway slot's session (0 for a plain exit).
    #[serde(default)]
    pub generation: u32,
    pub remaining: f64,
}

/// Warm-up pairings, kept under a hash of (key, exit handle): the seed of that hash and,
/// per pairing, its id and ages (seconds since it began and since it last leased).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPairings {
    pub seed: u64,
    pub entries: Vec<(u64, f64, f64)>,
}

/// Time on the clock of the pool that resumes: `shift` is added to a saved relative time to
/// place it (`now` less the time that passed since the save, by the wall clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resume {
    pub now: f64,
    /// Seconds between the save and now (never negative: a wall clock set back counts 0).
    pub elapsed: f64,
}

impl Resume {
    /// `saved_at` (Unix) read at Unix time `unix_now`, pool clock `now`.
    pub fn new(saved_at: f64, now: f64, unix_now: f64) -> Resume {
        let elapsed = unix_now - saved_at;
        Resume { now, elapsed: if elapsed.is_finite() { elapsed.max(0.0) } else { 0.0 } }
    }

    /// When something with `remaining` seconds left at the save ends, on this clock.
    pub fn ends(&self, remaining: f64) -> f64 {
        self.now + remaining - self.elapsed
    }

    /// When something `age` seconds old at the save happened, on this clock.
    pub fn happened(&self, age: f64) -> f64 {
        self.now - self.elapsed - age
    }
}

/// Why a state file was not resumed: for the event that says so.
#[derive(Debug, Clone, PartialEq)]
pub enum Unusable {
    Missing,
    Corrupt(String),
    Foreign(String),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Missing => f.write_str("no saved state yet"),
            Unusable::Corrupt(why) => write!(f, "the file cannot be read as a saved state ({why})"),
            Unusable::Foreign(why) => write!(f, "the file is not this pool's state ({why})"),
        }
    }
}

/// Reads a saved state. Nothing is judged against the pool here but the file itself.
pub fn read(path: &Path) -> std::result::Result<Saved, Unusable> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::Missing),
        Err(e) => return Err(Unusable::Corrupt(e.to_string())),
    };
    // The format and version first, so that a later version's file says so rather than
    // failing on a field it changed.
    #[derive(Deserialize)]
    struct Head {
        format: Option<String>,
        version: Option<u32>,
    }
    let head: Head = serde_json::from_slice(&bytes).map_err(|e| Unusable::Corrupt(e.to_string()))?;
    if head.format.as_deref() != Some(FORMAT) {
        return Err(Unusable::Foreign(format!("its format is not {FORMAT:?}")));
    }
    match head.version {
        Some(VERSION) => {}
        Some(v) => return Err(Unusable::Foreign(format!("version {v}, and this exitpool reads version {VERSION}"))),
        None => return Err(Unusable::Corrupt("it has no version".into())),
    }
    serde_json::from_slice(&bytes).map_err(|e| Unusable::Corrupt(e.to_string()))
}

/// Writes `saved` to `path` so that a reader sees the old file or the new one, never a part:
/// a temporary file beside it, flushed to disk, then renamed over it (and the directory
/// flushed, so the rename survives a power cut).
pub fn write(path: &Path, saved: &Saved) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| Error::BadInput(format!("cannot save the pool's state to {}: {what}: {e}", path.display()));
    let body = serde_json::to_vec(saved).map_err(|e| Error::BadInput(format!("cannot encode the pool's state: {e}")))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "state".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(|e| fail("create", e))?;
        f.write_all(&body).map_err(|e| fail("write", e))?;
        f.sync_all().map_err(|e| fail("fsync", e))?;
        std::fs::rename(&tmp, path).map_err(|e| fail("rename", e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_that_passed_while_down_counts_and_a_clock_set_back_counts_none() {
        // Saved at Unix 1000 with 50 s left; resumed at Unix 1030 on a clock reading 7.
        let r = Resume::new(1000.0, 7.0, 1030.0);
        assert_eq!(r.ends(50.0), 27.0);
        assert_eq!(r.happened(10.0), 7.0 - 30.0 - 10.0);
        let back = Resume::new(1000.0, 7.0, 900.0);
        assert_eq!(back.ends(50.0), 57.0);
    }

    #[test]
    fn a_file_of_a_later_version_or_another_format_is_foreign_and_garbage_is_corrupt() {
        let dir = std::env::temp_dir().join(format!("exitpool-persist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        assert_eq!(read(&p), Err(Unusable::Missing));
        std::fs::write(&p, b"{not json").unwrap();
        assert!(matches!(read(&p), Err(Unusable::Corrupt(_))));
        std::fs::write(&p, br#"{"format":"exitpool-state","version":99,"whatever":[1]}"#).unwrap();
        assert!(matches!(read(&p), Err(Unusable::Foreign(ref m)) if m.contains("version 99")), "{:?}", read(&p));
        std::fs::write(&p, br#"{"format":"something-else","version":1}"#).unwrap();
        assert!(matches!(read(&p), Err(Unusable::Foreign(_))));
        let saved = Saved {
            format: FORMAT.into(),
            version: VERSION,
            saved_at: 5.0,
            exits: vec!["a".into()],
            health: vec![],
            cooldowns: vec![],
            sessions: vec![],
            pairings: None,
            pacing: vec![],
        };
        write(&p, &saved).unwrap();
        assert_eq!(read(&p), Ok(saved));
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
