//! The shapes proxy text comes in: a URL scheme, `host:port`, the providers' `host:port:user:pass`.
//! Both parsing (`proxy`, `proxy_list`) and masking (`mask`) read text by these shapes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    Socks5,
    Socks5h,
}

impl Scheme {
    pub(crate) fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            "socks5" => Some(Scheme::Socks5),
            "socks5h" => Some(Scheme::Socks5h),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Socks5 => "socks5",
            Scheme::Socks5h => "socks5h",
        }
    }

    pub(crate) fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            // SOCKS has no port a URL parser knows; guessing 1080 would hide a typo.
            Scheme::Socks5 | Scheme::Socks5h => None,
        }
    }
}

/// Where a URL's scheme and its `://` end, if `raw` starts with one: a scheme is a letter
/// then letters, digits, `+`, `-` or `.` (RFC 3986), so a `://` inside a password is none.
pub fn scheme_end(raw: &str) -> Option<usize> {
    let i = raw.find("://")?;
    let scheme = &raw[..i];
    let mut chars = scheme.chars();
    let ok =
        chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(i + 3)
}

/// `host:port` (or a bare `host` unless `port_required`), the host a name, an IPv4 address
/// or a bracketed IPv6 address, the port all digits: text with no room for a password.
pub(crate) fn is_host_port(raw: &str, port_required: bool) -> bool {
    let (host_ok, port) = if let Some(rest) = raw.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else { return false };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        (is_ip(v6), port)
    } else {
        let name = |h: &str| !h.is_empty() && h.chars().all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_'));
        match raw.rsplit_once(':') {
            Some((h, p)) => (name(h), Some(p)),
            None => (name(raw), None),
        }
    };
    let port_ok = port.map_or(!port_required, is_port);
    host_ok && port_ok
}

/// An IP address, an IPv6 one possibly with a zone (`fe80::1%eth0`, or `%25eth0` as URLs
/// write it): text with no room for a password.
pub(crate) fn is_ip(raw: &str) -> bool {
    if raw.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let Some((addr, zone)) = raw.split_once('%') else {
        return false;
    };
    let zone = zone.strip_prefix("25").filter(|z| !z.is_empty()).unwrap_or(zone);
    addr.parse::<std::net::Ipv6Addr>().is_ok()
        && !zone.is_empty()
        && zone.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Splits the `host:port:user:pass` shape providers hand out (the host bracketed when it is
/// IPv6: `[::1]:8000:user:pass`). The password is everything after the third field's colon,
/// so it may hold anything, `@` and `:` included; the port must be all digits.
pub fn host_port_user_pass(raw: &str) -> Option<(&str, &str, &str, &str)> {
    let (host, rest) = if raw.starts_with('[') {
        let end = raw.find(']')?;
        (&raw[..=end], raw[end + 1..].strip_prefix(':')?)
    } else {
        raw.split_once(':')?
    };
    let (port, rest) = rest.split_once(':')?;
    let (user, pass) = rest.split_once(':')?;
    is_port(port).then_some((host, port, user, pass))
}

/// A port as proxy lists write one: digits, at least one.
pub fn is_port(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
