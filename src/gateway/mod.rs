//! Gateways: one provider endpoint that mints sticky sessions from a token in the proxy user
//! name (or password). A gateway expands into `slots` exits `"{id}-{n}"` (n from 0), which
//! the ring hashes like any exit; each slot's credentials carry its current token, derived
//! from (gateway id, slot, generation) so that every worker agrees without talking, and the
//! generation moves on a schedule shorter than the provider's session lifetime.
//!
//! The rooms: `template` (credential templates), `token` (session ids in the provider's
//! alphabet), `schedule` (when a slot's generation moves), `presets` (providers' formats).

pub mod presets;
pub mod schedule;
pub mod template;
pub mod token;

use crate::error::{Error, Result};
use crate::exit::{validate_capacity, validate_id, Exit};
use crate::proxy::ProxyUrl;
use presets::Preset;
use schedule::{default_margin, Schedule};
use template::{Fill, Piece, Template};
use token::{Alphabet, IdRule, ANY_RULE, DEFAULT_LENGTH};

/// More slots than this would be a slip: 100,000 is the pool size the design says works.
pub const MAX_SLOTS: u32 = 100_000;

/// The shortest lifetime taken: a token must last long enough to be used at all.
pub const MIN_LIFETIME: f64 = 1.0;

/// A slot exit's link to its gateway: the gateway's index in its pool and the slot number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayLink {
    pub gateway: u32,
    pub slot: u32,
}

/// What a user writes; [`Gateway::new`] checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewaySpec {
    pub id: String,
    pub proxy: String,
    pub slots: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Seconds; `None`: the preset's default, or tokens that never expire without a preset.
    pub lifetime: Option<f64>,
    pub margin: Option<f64>,
    pub capacity: i64,
    pub tags: Vec<(String, String)>,
    pub preset: Option<String>,
    pub session_alphabet: Option<String>,
    pub session_length: Option<i64>,
    /// After a rotation, move a key's session to the slot's new token without a word.
    pub rebind: bool,
}

impl GatewaySpec {
    pub fn new(id: &str, proxy: &str, slots: i64) -> GatewaySpec {
        GatewaySpec {
            id: id.to_owned(),
            proxy: proxy.to_owned(),
            slots,
            username: None,
            password: None,
            lifetime: None,
            margin: None,
            capacity: 1,
            tags: Vec::new(),
            preset: None,
            session_alphabet: None,
            session_length: None,
            rebind: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Gateway {
    pub id: String,
    proxy: ProxyUrl,
    pub slots: u32,
    username: Template,
    password: Option<Template>,
    pub lifetime: Option<f64>,
    pub margin: f64,
    /// The lifetime as the templates' `{lifetime}` spells it.
    lifetime_text: String,
    pub capacity: u32,
    pub tags: Vec<(String, String)>,
    pub preset: Option<&'static Preset>,
    pub alphabet: Alphabet,
    pub length: u32,
    pub rebind: bool,
    schedule: Schedule,
}

impl Gateway {
    pub fn new(spec: GatewaySpec) -> Result<Gateway> {
        let id = validate_id(&spec.id).map_err(|e| Error::BadInput(e.to_string().replacen("exit id", "gateway id", 1)))?;
        let name = format!("gateway {id:?}");
        let at = |e: Error| Error::BadInput(format!("{name}: {e}"));
        let proxy = ProxyUrl::parse(&spec.proxy)?;
        if !(1..=MAX_SLOTS as i64).contains(&spec.slots) {
            return Err(at(Error::BadInput(format!("slots {} is outside 1..={MAX_SLOTS}", spec.slots))));
        }
        let slots = spec.slots as u32;
        let capacity = validate_capacity(spec.capacity).map_err(at)?;
        let preset = spec.preset.as_deref().map(presets::find).transpose().map_err(at)?;
        let (lifetime, lifetime_text) = Self::lifetime(&spec, preset).map_err(at)?;
        let margin = Self::margin(spec.margin, lifetime).map_err(at)?;
        let (alphabet, length) = Self::id_rule(&spec, preset).map_err(at)?;
        let username = spec.username.as_deref().or(preset.map(|p| p.username));
        let password = spec.password.as_deref().or(preset.map(|p| p.password));
        let username = Template::parse(username.unwrap_or("{user}"), "username template", true).map_err(at)?;
        let password = match password {
            Some(p) => Some(Template::parse(p, "password template", false).map_err(at)?),
            None if proxy.password().is_some() => Some(Template::parse("{password}", "password template", false)?),
            None => None,
        };
        let mut tags = spec.tags;
        tags.sort();
        tags.dedup_by(|a, b| a.0 == b.0);
        let g = Gateway {
            id,
            proxy,
            slots,
            username,
            password,
            lifetime,
            margin,
            lifetime_text,
            capacity,
            tags,
            preset,
            alphabet,
            length,
            rebind: spec.rebind,
            schedule: Schedule::new(lifetime, margin),
        };
        g.check_templates().map_err(at)?;
        Ok(g)
    }

    /// The lifetime in seconds and as `{lifetime}` spells it: in the preset's unit within its
    /// documented range, else whole seconds.
    fn lifetime(spec: &GatewaySpec, preset: Option<&Preset>) -> Result<(Option<f64>, String)> {
        if let Some(l) = spec.lifetime {
            if !l.is_finite() || l < MIN_LIFETIME {
                return Err(Error::BadInput(format!(
                    "lifetime {l} must be a finite number of seconds >= {MIN_LIFETIME} (or None: tokens never expire)"
                )));
            }
            crate::clock::check_ceiling(&["lifetime"], l)?;
        }
        match (preset, spec.lifetime) {
            (Some(p), Some(l)) => match p.lifetime {
                Some(rule) => Ok((Some(l), rule.render(p.name, l)?)),
                None => Err(Error::BadInput(format!("lifetime {l} s: {}'s sessions never expire; leave lifetime at None", p.name))),
            },
            (Some(p), None) => match p.lifetime {
                Some(rule) => Ok((Some(rule.default), rule.render(p.name, rule.default)?)),
                None => Ok((None, String::new())),
            },
            (None, Some(l)) => Ok((Some(l), format!("{}", l.round() as u64))),
            (None, None) => Ok((None, String::new())),
        }
    }

    fn margin(margin: Option<f64>, lifetime: Option<f64>) -> Result<f64> {
        let Some(lifetime) = lifetime else {
            return match margin {
                None | Some(0.0) => Ok(0.0),
                Some(m) => Err(Error::BadInput(format!("margin {m} s has no lifetime to come off: tokens that never expire need none"))),
            };
        };
        match margin {
            None => Ok(default_margin(lifetime)),
            Some(m) if m.is_finite() && m >= 0.0 && m < lifetime => Ok(m),
            Some(m) => Err(Error::BadInput(format!("margin {m} must be a number of seconds >= 0 and below the lifetime {lifetime} s"))),
        }
    }

    /// The alphabet and length of tokens: the user's, if the provider's rule allows them.
    fn id_rule(spec: &GatewaySpec, preset: Option<&Preset>) -> Result<(Alphabet, u32)> {
        let rule = preset.map_or(ANY_RULE, |p| p.rule);
        let whose = preset.map_or_else(|| "session ids".to_owned(), |p| format!("{}'s session ids", p.name));
        let alphabet = match spec.session_alphabet.as_deref() {
            None => rule.alphabet,
            Some(a) => {
                let a = Alphabet::parse(a)?;
                if a > rule.alphabet {
                    return Err(Error::BadInput(format!(
                        "session_alphabet '{}' is wider than {whose} allow ('{}': {})",
                        a.name(),
                        rule.alphabet.name(),
                        String::from_utf8_lossy(rule.alphabet.chars())
                    )));
                }
                a
            }
        };
        let length = match spec.session_length {
            None => preset.map_or(DEFAULT_LENGTH, |p| p.length),
            Some(n) if (rule.min_len as i64..=rule.max_len as i64).contains(&n) => n as u32,
            Some(n) => {
                return Err(Error::BadInput(format!("session_length {n} is outside {}..={} for {whose}", rule.min_len, rule.max_len)))
            }
        };
        Ok((alphabet, length))
    }

    /// Refuses templates that cannot work: a tag or credential they name that is not there,
    /// or, with more than one slot, no `{session}` (every slot would be one provider session).
    fn check_templates(&self) -> Result<()> {
        let templates = std::iter::once(("username", &self.username)).chain(self.password.as_ref().map(|p| ("password", p)));
        let mut session = false;
        for (what, t) in templates {
            session |= t.uses(&Piece::Session);
            if let Some(tag) = t.tags().find(|tag| !self.tags.iter().any(|(k, _)| k == tag)) {
                let given: Vec<&str> = self.tags.iter().map(|(k, _)| k.as_str()).collect();
                return Err(Error::BadInput(format!(
                    "the {what} template names the tag {{{tag}}}, but tags has no {tag:?} (given: {})",
                    if given.is_empty() { "none".to_owned() } else { given.join(", ") }
                )));
            }
            if t.uses(&Piece::User) && self.proxy.username().is_none() {
                return Err(Error::BadInput(format!("the {what} template uses {{user}}, but the proxy URL has no user name")));
            }
            if t.uses(&Piece::Password) && self.proxy.password().is_none() {
                return Err(Error::BadInput(format!("the {what} template uses {{password}}, but the proxy URL has no password")));
            }
            if t.uses(&Piece::Lifetime) && self.lifetime.is_none() {
                return Err(Error::BadInput(format!("the {what} template uses {{lifetime}}, but the gateway has no lifetime")));
            }
        }
        if !session && self.slots > 1 {
            return Err(Error::BadInput(format!(
                "{} slots but neither the username nor the password template has {{session}}: every slot would be the same provider session",
                self.slots
            )));
        }
        Ok(())
    }

    pub fn slot_id(&self, slot: u32) -> String {
        format!("{}-{slot}", self.id)
    }

    pub fn phase(&self, slot: u32) -> f64 {
        self.schedule.phase(&self.id, slot)
    }

    /// The slot's generation at Unix time `unix`.
    pub fn generation(&self, slot: u32, unix: f64) -> u64 {
        self.schedule.generation(self.phase(slot), unix)
    }

    /// The Unix time the slot's generation `g` ends (`inf` if tokens never expire).
    pub fn rotates_at(&self, slot: u32, g: u64) -> f64 {
        self.schedule.ends(self.phase(slot), g)
    }

    /// The slot's token in generation `g`. Not a secret on its own, but part of the
    /// credentials: shown only to the user who asks.
    pub fn token(&self, slot: u32, g: u64) -> String {
        token::token(&self.id, slot, g, self.alphabet, self.length)
    }

    /// The slot's exit in generation `g`, its credentials filled with that generation's token.
    pub fn slot_exit(&self, slot: u32, g: u64, gateway: u32) -> Exit {
        let session = self.token(slot, g);
        let fill = Fill {
            user: self.proxy.username().unwrap_or(""),
            password: self.proxy.password().unwrap_or(""),
            session: &session,
            lifetime: &self.lifetime_text,
            tags: &self.tags,
        };
        let user = self.username.render(&fill);
        let pass = self.password.as_ref().map(|p| p.render(&fill));
        let hostport = format!("{}:{}", self.proxy.host(), self.proxy.port());
        let user = (!user.is_empty() || pass.is_some()).then_some(user);
        // The parts were checked when the gateway was made; a template can only add text to
        // the credentials, which are encoded, so this cannot fail.
        let proxy =
            ProxyUrl::from_parts(self.proxy.scheme(), &hostport, user.as_deref(), pass.as_deref()).expect("gateway parts were checked");
        Exit {
            id: self.slot_id(slot),
            proxy,
            ip: None,
            capacity: self.capacity,
            tags: self.tags.clone(),
            gateway: Some(GatewayLink { gateway, slot }),
        }
    }

    /// Every slot's exit at Unix time `unix`.
    pub fn exits_at(&self, unix: f64, gateway: u32) -> Vec<Exit> {
        (0..self.slots).map(|s| self.slot_exit(s, self.generation(s, unix), gateway)).collect()
    }

    /// The proxy URL with the password masked (the templates are not shown: the password
    /// template may hold the password).
    pub fn masked_proxy(&self) -> &str {
        self.proxy.masked()
    }

    /// The rule tokens follow: the provider's lengths, with the alphabet in use.
    pub fn rule(&self) -> IdRule {
        let r = self.preset.map_or(ANY_RULE, |p| p.rule);
        IdRule { alphabet: self.alphabet, ..r }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(slots: i64) -> GatewaySpec {
        let mut s = GatewaySpec::new("resi", "http://customer-c1:s3cret@gw.provider.example:7777", slots);
        s.username = Some("{user}-cc-{country}-session-{session}".into());
        s.lifetime = Some(600.0);
        s.tags = vec![("country".into(), "de".into())];
        s
    }

    fn err(s: GatewaySpec) -> String {
        let e = Gateway::new(s).unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        e
    }

    #[test]
    fn expands_into_slot_exits_with_the_token_in_the_credentials() {
        let g = Gateway::new(spec(3)).unwrap();
        let exits = g.exits_at(1.7e9, 4);
        assert_eq!(exits.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["resi-0", "resi-1", "resi-2"]);
        let e = &exits[1];
        let gen = g.generation(1, 1.7e9);
        assert_eq!(e.proxy.username().unwrap(), format!("customer-c1-cc-de-session-{}", g.token(1, gen)));
        assert_eq!(e.proxy.password(), Some("s3cret"));
        assert_eq!(e.gateway, Some(GatewayLink { gateway: 4, slot: 1 }));
        assert_eq!(e.tag("country"), Some("de"));
        assert_eq!(g.margin, 60.0);
    }

    #[test]
    fn a_preset_fills_templates_and_lifetime_in_its_unit() {
        let mut s = GatewaySpec::new("ox", "http://customer-c1:s3cret@pr.oxylabs.io:7777", 2);
        s.preset = Some("oxylabs".into());
        let g = Gateway::new(s.clone()).unwrap();
        assert_eq!(g.lifetime, Some(600.0));
        let e = g.slot_exit(0, 5, 0);
        assert_eq!(e.proxy.username().unwrap(), format!("customer-c1-sessid-{}-sesstime-10", g.token(0, 5)));
        assert!(g.token(0, 5).bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        s.preset = Some("iproyal".into());
        s.lifetime = Some(1800.0);
        let g = Gateway::new(s).unwrap();
        let e = g.slot_exit(1, 0, 0);
        assert_eq!(e.proxy.username(), Some("customer-c1"));
        assert_eq!(e.proxy.password().unwrap(), format!("s3cret_session-{}_lifetime-30m", g.token(1, 0)));
        assert_eq!(g.token(1, 0).len(), 8);
    }

    #[test]
    fn without_a_lifetime_tokens_never_rotate() {
        let mut s = spec(2);
        s.lifetime = None;
        let g = Gateway::new(s).unwrap();
        assert_eq!(g.generation(1, 4e9), 0);
        assert_eq!(g.rotates_at(1, 0), f64::INFINITY);
        assert_eq!(g.margin, 0.0);
    }

    #[test]
    fn every_bad_value_is_named() {
        type Change = Box<dyn Fn(&mut GatewaySpec)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|s| s.slots = 0), "slots 0 is outside 1..=100000"),
            (Box::new(|s| s.username = Some("{user}-x".into())), "neither the username nor the password template has {session}"),
            (Box::new(|s| s.username = Some("{user}-{city}-{session}".into())), "names the tag {city}, but tags has no \"city\""),
            (Box::new(|s| s.username = Some("{user}-{ses sion}".into())), "unknown placeholder {ses sion}"),
            (Box::new(|s| s.lifetime = Some(0.5)), "lifetime 0.5 must be"),
            (Box::new(|s| s.lifetime = Some(f64::NAN)), "lifetime NaN must be"),
            (Box::new(|s| s.margin = Some(600.0)), "margin 600 must be"),
            (Box::new(|s| s.capacity = 0), "capacity 0 is outside"),
            (Box::new(|s| s.id = " x".into()), "gateway id"),
            (Box::new(|s| s.preset = Some("nope".into())), "preset \"nope\" is not one of"),
            (Box::new(|s| s.session_alphabet = Some("hex".into())), "session_alphabet \"hex\""),
            (Box::new(|s| s.session_length = Some(0)), "session_length 0 is outside 1..=64"),
            (
                Box::new(|s| {
                    s.preset = Some("pingnetwork".into());
                    s.session_length = Some(5);
                }),
                "session_length 5 is outside 6..=15 for pingnetwork's session ids",
            ),
            (
                Box::new(|s| {
                    s.preset = Some("oxylabs".into());
                    s.session_alphabet = Some("alnum".into());
                }),
                "session_alphabet 'alnum' is wider than oxylabs's session ids allow",
            ),
            (
                Box::new(|s| {
                    s.preset = Some("thordata".into());
                    s.lifetime = Some(100.0 * 60.0);
                }),
                "lifetime 6000 s is outside thordata's documented range",
            ),
            (
                Box::new(|s| {
                    s.preset = Some("massive_isp".into());
                    s.username = None;
                }),
                "massive_isp's sessions never expire",
            ),
            (Box::new(|s| s.proxy = "http://gw.example:1".into()), "uses {user}, but the proxy URL has no user name"),
        ];
        for (change, needle) in cases {
            let mut s = spec(3);
            change(&mut s);
            let e = err(s);
            assert!(e.contains(needle), "expected {needle:?} in {e:?}");
        }
        // A password template is never echoed, even when the error is about it.
        let mut s = spec(3);
        s.password = Some("s3cret_{bad name}".into());
        assert!(err(s).contains("password template: unknown placeholder"));
        let mut s = spec(3);
        s.proxy = "http://customer-c1:s3cret@gw.example:99999".into();
        err(s);
    }

    #[test]
    fn one_slot_needs_no_session_placeholder() {
        let mut s = spec(1);
        s.username = None;
        s.tags.clear();
        let g = Gateway::new(s).unwrap();
        assert_eq!(g.slot_exit(0, 0, 0).proxy.as_str(), "http://customer-c1:s3cret@gw.provider.example:7777");
    }
}
