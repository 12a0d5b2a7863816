//! An exit: one way out to the internet, identified by a stable id that the ring hashes.

use crate::error::{Error, Result};
use crate::mask::mask_raw;
use crate::proxy::ProxyUrl;
use std::net::IpAddr;

/// More points than this per exit would only cost memory: measured capacities stop at 6.
pub const MAX_CAPACITY: u32 = 10_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    pub id: String,
    pub proxy: ProxyUrl,
    pub ip: Option<IpAddr>,
    pub capacity: u32,
    /// Sorted by key, so equal tag sets compare and print equally.
    pub tags: Vec<(String, String)>,
    /// For a gateway's slot: which gateway and slot (its credentials then carry the slot's
    /// current token, and a pool replaces the exit when the token rotates).
    pub gateway: Option<crate::gateway::GatewayLink>,
}

impl Exit {
    pub fn new(id: &str, proxy: &str, ip: Option<&str>, capacity: i64, mut tags: Vec<(String, String)>) -> Result<Exit> {
        let proxy = ProxyUrl::parse(proxy)?;
        let id = validate_id(id)?;
        let capacity = validate_capacity(capacity)?;
        let ip = ip
            .map(|s| {
                s.trim()
                    .parse::<IpAddr>()
                    .map_err(|_| Error::BadInput(format!("exit {id:?}: ip {} is not an IP address", crate::mask::shown(s))))
            })
            .transpose()?;
        tags.sort();
        tags.dedup_by(|a, b| a.0 == b.0);
        Ok(Exit { id, proxy, ip, capacity, tags, gateway: None })
    }

    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

pub fn validate_id(id: &str) -> Result<String> {
    // Masked: text that is no valid id may be a proxy URL given in the wrong place.
    if id.is_empty() || id.trim() != id {
        return Err(Error::BadInput(format!("exit id {:?} must be non-empty with no surrounding spaces", mask_raw(id))));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::BadInput(format!("exit id {:?} must not contain control characters", mask_raw(id))));
    }
    Ok(id.to_owned())
}

/// Capacity 0 is refused rather than read as "benched": an exit in service always takes at
/// least one identity, and the ring gives 0 the points of 1, so a 0 would carry as much as a 1.
/// Taking an exit out is `bench`, which says so in the snapshot and the events.
pub fn validate_capacity(capacity: i64) -> Result<u32> {
    if capacity == 0 {
        return Err(Error::setting(
            &["capacity"],
            format!("0 is outside 1..={MAX_CAPACITY}: an exit takes at least one identity; to take an exit out of service, use pool.bench(exit_id)"),
        ));
    }
    if !(1..=MAX_CAPACITY as i64).contains(&capacity) {
        return Err(Error::setting(&["capacity"], format!("{capacity} is outside 1..={MAX_CAPACITY}")));
    }
    Ok(capacity as u32)
}
