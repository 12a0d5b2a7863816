//! Providers' documented session formats. Each preset fills the credential templates, the
//! rule for session ids, and the lifetime parameter in the provider's unit with its
//! documented range. Formats change: every preset names the page it was checked against
//! (December 2026), and docs/gateways.md repeats the table.

use super::token::{Alphabet, IdRule};
use crate::error::{Error, Result};

/// How a provider spells a lifetime in its parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Whole minutes: `sesstime-10`.
    Minutes,
    /// A number and one unit letter, the largest that divides it: `90s`, `10m`, `2h`, `7d`.
    Suffixed,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LifetimeRule {
    pub unit: Unit,
    /// The documented range, in seconds.
    pub min: f64,
    pub max: f64,
    /// The provider's default, used when the gateway gives no lifetime.
    pub default: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub username: &'static str,
    pub password: &'static str,
    pub rule: IdRule,
    /// Token length used unless the gateway asks for another within `rule`.
    pub length: u32,
    /// `None`: the provider's sessions never expire, and a lifetime is refused.
    pub lifetime: Option<LifetimeRule>,
    pub source: &'static str,
}

const MIN: f64 = 60.0;

/// Oxylabs residential and mobile: `customer-USER-sessid-<id>-sesstime-<minutes>`; the id is
/// "a random alphanumeric string" (the examples are lower case), `sesstime` up to 1,440
/// minutes, 10 minutes by default. The session also ends after 60 s without a request, which
/// no schedule can prevent: a probe sees it as broken stickiness.
/// Source: <https://developers.oxylabs.io/products/proxies/residential-proxies/session-control>
pub const OXYLABS: Preset = Preset {
    name: "oxylabs",
    username: "{user}-sessid-{session}-sesstime-{lifetime}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Lower, min_len: 1, max_len: 32 },
    length: 10,
    lifetime: Some(LifetimeRule { unit: Unit::Minutes, min: MIN, max: 1440.0 * MIN, default: 10.0 * MIN }),
    source: "https://developers.oxylabs.io/products/proxies/residential-proxies/session-control",
};

/// Thordata: `...-sessid-<id>-sesstime-<minutes>`, alphanumeric id, at most 90 minutes, 10 by
/// default (and 90 s idle ends it).
/// Source: <https://doc.thordata.com/doc/proxies/residential-proxies/session-control>
pub const THORDATA: Preset = Preset {
    name: "thordata",
    username: "{user}-sessid-{session}-sesstime-{lifetime}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Alnum, min_len: 1, max_len: 32 },
    length: 10,
    lifetime: Some(LifetimeRule { unit: Unit::Minutes, min: MIN, max: 90.0 * MIN, default: 10.0 * MIN }),
    source: "https://doc.thordata.com/doc/proxies/residential-proxies/session-control",
};

/// Geonode: `USER-session-<id>-lifetime-<minutes>`, id `^[A-Za-z0-9_]{1,25}$`, lifetime 3 to
/// 1,440 minutes, 10 by default.
/// Source: <https://docs.geonode.com/reference/session-id-lifetime>
pub const GEONODE: Preset = Preset {
    name: "geonode",
    username: "{user}-session-{session}-lifetime-{lifetime}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Word, min_len: 1, max_len: 25 },
    length: 16,
    lifetime: Some(LifetimeRule { unit: Unit::Minutes, min: 3.0 * MIN, max: 1440.0 * MIN, default: 10.0 * MIN }),
    source: "https://docs.geonode.com/reference/session-id-lifetime",
};

/// Ping Network: `USER-session-<id>-lifetime-<minutes>`, id alphanumeric of 6 to 15
/// characters, lifetime at most 120 minutes (more answers 412), 40 by default.
/// Source: <https://docs.pingnetwork.io/proxy/residential/sessions>
pub const PINGNETWORK: Preset = Preset {
    name: "pingnetwork",
    username: "{user}-session-{session}-lifetime-{lifetime}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Alnum, min_len: 6, max_len: 15 },
    length: 12,
    lifetime: Some(LifetimeRule { unit: Unit::Minutes, min: MIN, max: 120.0 * MIN, default: 40.0 * MIN }),
    source: "https://docs.pingnetwork.io/proxy/residential/sessions",
};

/// IPRoyal residential: the session goes in the password, `PASS_session-<id>_lifetime-<n><unit>`,
/// the id "a random alphanumeric string, precisely 8 characters", the lifetime one unit only,
/// from 1 second to 7 days. IPRoyal documents no default: 10 minutes here.
/// Source: <https://docs.iproyal.com/proxies/residential/proxy/rotation>
pub const IPROYAL: Preset = Preset {
    name: "iproyal",
    username: "{user}",
    password: "{password}_session-{session}_lifetime-{lifetime}",
    rule: IdRule { alphabet: Alphabet::Alnum, min_len: 8, max_len: 8 },
    length: 8,
    lifetime: Some(LifetimeRule { unit: Unit::Suffixed, min: 1.0, max: 7.0 * 86_400.0, default: 10.0 * MIN }),
    source: "https://docs.iproyal.com/proxies/residential/proxy/rotation",
};

/// Massive residential: `USER-session-<id>-sessionttl-<minutes>`, any id of up to 255
/// characters, a static TTL from the session's creation (not extended by requests) of up to
/// 240 minutes, 15 by default.
/// Source: <https://docs.joinmassive.com/residential/sticky-sessions>
pub const MASSIVE: Preset = Preset {
    name: "massive",
    username: "{user}-session-{session}-sessionttl-{lifetime}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Word, min_len: 1, max_len: 255 },
    length: 16,
    lifetime: Some(LifetimeRule { unit: Unit::Minutes, min: MIN, max: 240.0 * MIN, default: 15.0 * MIN }),
    source: "https://docs.joinmassive.com/residential/sticky-sessions",
};

/// Massive ISP: `USER-session-<id>`, any id of up to 255 characters, no expiration.
/// Source: <https://docs.joinmassive.com/isp-proxies/sticky-sessions>
pub const MASSIVE_ISP: Preset = Preset {
    name: "massive_isp",
    username: "{user}-session-{session}",
    password: "{password}",
    rule: IdRule { alphabet: Alphabet::Word, min_len: 1, max_len: 255 },
    length: 16,
    lifetime: None,
    source: "https://docs.joinmassive.com/isp-proxies/sticky-sessions",
};

pub const ALL: [&Preset; 7] = [&OXYLABS, &THORDATA, &GEONODE, &PINGNETWORK, &IPROYAL, &MASSIVE, &MASSIVE_ISP];

pub fn find(name: &str) -> Result<&'static Preset> {
    ALL.iter().copied().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|p| p.name).collect();
        Error::BadInput(format!("preset {:?} is not one of {}", crate::mask::mask_raw(name), names.join(", ")))
    })
}

/// A lifetime in seconds as `text`.
fn seconds(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0} s")
    } else {
        format!("{v} s")
    }
}

impl LifetimeRule {
    /// Checks `lifetime` (seconds) against the documented range and unit, and spells it as
    /// the provider's parameter wants it.
    pub fn render(&self, preset: &str, lifetime: f64) -> Result<String> {
        if !(self.min..=self.max).contains(&lifetime) {
            return Err(Error::BadInput(format!(
                "lifetime {} is outside {preset}'s documented range {} ..= {}",
                seconds(lifetime),
                seconds(self.min),
                seconds(self.max)
            )));
        }
        match self.unit {
            Unit::Minutes if lifetime % 60.0 != 0.0 => Err(Error::BadInput(format!(
                "lifetime {} is not a whole number of minutes, which is how {preset} takes it",
                seconds(lifetime)
            ))),
            Unit::Minutes => Ok(format!("{}", (lifetime / 60.0) as u64)),
            Unit::Suffixed if lifetime.fract() != 0.0 => Err(Error::BadInput(format!(
                "lifetime {} is not a whole number of seconds, which is how {preset} takes it",
                seconds(lifetime)
            ))),
            Unit::Suffixed => {
                let s = lifetime as u64;
                let (n, unit) =
                    [(86_400, 'd'), (3_600, 'h'), (60, 'm'), (1, 's')].into_iter().find(|(d, _)| s % d == 0).expect("1 divides");
                Ok(format!("{}{unit}", s / n))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::template::Template;

    #[test]
    fn every_preset_parses_and_places_the_session() {
        for p in ALL {
            let u = Template::parse(p.username, "username", true).unwrap();
            let w = Template::parse(p.password, "password", false).unwrap();
            assert!(u.uses(&crate::gateway::template::Piece::Session) || w.uses(&crate::gateway::template::Piece::Session), "{}", p.name);
            assert!((p.rule.min_len..=p.rule.max_len).contains(&p.length), "{}", p.name);
            if let Some(l) = p.lifetime {
                assert!(l.render(p.name, l.default).is_ok(), "{}", p.name);
            }
            assert!(p.source.starts_with("https://"));
        }
    }

    #[test]
    fn lifetimes_are_checked_and_spelled_in_the_providers_unit() {
        let l = OXYLABS.lifetime.unwrap();
        assert_eq!(l.render("oxylabs", 600.0).unwrap(), "10");
        assert!(l.render("oxylabs", 90.0).unwrap_err().to_string().contains("not a whole number of minutes"));
        let e = THORDATA.lifetime.unwrap().render("thordata", 91.0 * 60.0).unwrap_err().to_string();
        assert!(e.contains("5460 s is outside thordata's documented range 60 s ..= 5400 s"), "{e}");
        assert!(GEONODE.lifetime.unwrap().render("geonode", 120.0).is_err());
        assert!(PINGNETWORK.lifetime.unwrap().render("pingnetwork", 121.0 * 60.0).is_err());
        let r = IPROYAL.lifetime.unwrap();
        assert_eq!(r.render("iproyal", 90.0).unwrap(), "90s");
        assert_eq!(r.render("iproyal", 600.0).unwrap(), "10m");
        assert_eq!(r.render("iproyal", 7200.0).unwrap(), "2h");
        assert_eq!(r.render("iproyal", 7.0 * 86_400.0).unwrap(), "7d");
        assert!(r.render("iproyal", 8.0 * 86_400.0).is_err());
    }

    #[test]
    fn presets_are_found_by_name() {
        assert_eq!(find("geonode").unwrap().name, "geonode");
        assert!(find("brightdata").unwrap_err().to_string().contains("oxylabs, thordata"));
    }
}
