//! What a keyless pick asks about an exit (may its tunnel serve, its weight, its active
//! leases, its capacity, where its shared record lives), kept in one 32-byte record per exit,
//! two to a cache line.
//!
//! `p2c` weighs exits drawn at random: in a pool larger than the caches, each array a draw
//! reads at a random index is a cache miss (and, in the exit's 512-byte slot, a TLB miss).
//! The answers lived in three arrays (the exit's 512-byte slot, its tunnel breaker, its weight
//! factor); here they are one line, in an array of 3.2 MB at 100,000 exits (the slots: 50 MB).
//! The record is kept current where its inputs change: the board's `refresh` (every tunnel
//! transition, report, panic change and group change) and the pool's lease count and
//! capacity (`HealthBoard::set_active`, `HealthBoard::set_capacity`).

use super::{Breaker, State};

/// Whether an exit's tunnel admits a lease, as far as its breaker's state alone says. Its
/// gateway's breaker (for a slot in an exit group) and a probing breaker's trials out change
/// without a transition, so those ask the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Gate {
    /// Healthy or degraded, in no group: admits.
    Open,
    /// Quarantined or dead, in no group: admits only in panic.
    Shut,
    /// Probing, or in a group: the breakers decide.
    Ask,
}

impl Gate {
    pub(super) fn of(tunnel: &Breaker) -> Gate {
        if tunnel.group() != 0 {
            return Gate::Ask;
        }
        match tunnel.state() {
            State::Healthy | State::Degraded => Gate::Open,
            State::Quarantined | State::Dead => Gate::Shut,
            State::Probing => Gate::Ask,
        }
    }
}

/// One exit's record (see the module's comment).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
pub(super) struct Draw {
    /// Tunnel state factor (at least the panic floor) x adaptive weight.
    pub(super) factor: f64,
    /// Active leases: the pool's slot holds the count, this a copy of it.
    pub(super) active: u32,
    /// The exit's capacity (at most `MAX_CAPACITY`).
    pub(super) capacity: u16,
    pub(super) gate: Gate,
    /// The address of the exit's shared record (its `Arc<Exit>`) when it was last leased, 0
    /// before: a lease takes a reference to it, a write to a line that a pick at a random exit
    /// of a large pool finds cold, and that waited for the slot, where the pointer is, before
    /// it could start. Only ever prefetched, never read through: one that is stale (the exit
    /// was resized or its gateway token rotated since) costs a useless hint, nothing more.
    pub(super) home: usize,
}

const _: () = assert!(std::mem::size_of::<Draw>() == 32);
const _: () = assert!(crate::exit::MAX_CAPACITY <= u16::MAX as u32);

impl Default for Draw {
    fn default() -> Draw {
        Draw { factor: 1.0, active: 0, capacity: 1, gate: Gate::Open, home: 0 }
    }
}

/// What a pick asks about an exit for one site (its breaker for the site, and until when it
/// rests after a 429), in one 16-byte record per exit, beside the site's breakers: a pick
/// reads the breaker itself only while it is probing (its trials out decide).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
pub(super) struct SiteGate {
    /// `-inf`: not cooling.
    pub(super) cool_until: f64,
    /// The exit's breaker for the site: an exit without one is as a healthy one.
    pub(super) state: State,
}

const _: () = assert!(std::mem::size_of::<SiteGate>() == 16);

impl Default for SiteGate {
    fn default() -> SiteGate {
        SiteGate { cool_until: f64::NEG_INFINITY, state: State::Healthy }
    }
}
