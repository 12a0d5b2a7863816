//! Masking: whatever could be a password in text a user gave is hidden before the text is
//! shown anywhere (errors, reprs, logs). A leaf of the core: every module that echoes user text
//! masks through here.

use crate::proxy_syntax::{host_port_user_pass, is_host_port, is_ip, scheme_end, Scheme};

/// What httpx prints in place of a password; users already know it.
pub const MASK: &str = "[secure]";

/// A user's text as an error message quotes it: masked, then quoted and escaped. Every error
/// that echoes a string the user gave goes through here, whatever the string was meant to be:
/// a proxy URL typed into the wrong place must not come back with its password.
pub fn shown(raw: &str) -> String {
    format!("{:?}", mask_raw(raw))
}

/// Masks whatever could be a password in text that failed to parse, for error messages.
/// It errs on the side of hiding: everything between the first `:` of the userinfo and the
/// last `@`, or everything after the third `:` of a `host:port:user:pass` line.
pub fn mask_raw(raw: &str) -> String {
    // A `://` after a word that is no valid scheme (`h*tps://u:pw`) still starts a URL's
    // userinfo; one after a `:` or `@` is inside a password (`user:pw://x@host`).
    let mangled = || raw.find("://").filter(|&i| !raw[..i].contains([':', '@'])).map(|i| i + 3);
    let scheme = scheme_end(raw);
    // A proxy URL's userinfo ends at its last `@` (WHATWG): what follows is its host and port.
    let proxy_url = scheme.is_some_and(|i| Scheme::parse(&raw[..i - 3]).is_some());
    let url_start = scheme.or_else(mangled);
    let (prefix, rest) = match url_start {
        Some(i) => raw.split_at(i),
        None => ("", raw),
    };
    // An IP address holds no password, even one that splits like `host:port:user:pass`
    // (`0:0:0:1::`).
    if prefix.is_empty() && is_ip(raw) {
        return raw.to_owned();
    }
    // `host:port:user:pass` first: its password may hold an `@` (or anything else).
    if let (true, Some((host, port, user, _))) = (prefix.is_empty(), host_port_user_pass(rest)) {
        return format!("{host}:{port}:{user}:{MASK}");
    }
    if let Some(at) = rest.rfind('@') {
        let userinfo = &rest[..at];
        let tail = &rest[at + 1..];
        // Other text that failed to parse may be no URL even after a scheme-like word (a
        // `host:port:user:pass` line whose host is a word and whose user holds an `@` puts the
        // password after the `@`): which part is the password is anyone's guess. Unless what
        // follows the `@` is a plain `host[:port]`, only the first field is shown.
        // Even after a real scheme, a "host" with whitespace in it (`@ ss word`: a password
        // with an `@` and a space in it) is hidden.
        let plain = if proxy_url { !tail.contains(char::is_whitespace) } else { is_host_port(tail.trim_end_matches('/'), false) };
        if !plain {
            let first = rest.split([':', '@']).next().unwrap_or("");
            return format!("{prefix}{first}:{MASK}");
        }
        return match userinfo.find(':') {
            Some(c) => format!("{prefix}{}:{MASK}@{tail}", &userinfo[..c]),
            None => format!("{prefix}{userinfo}@{tail}"),
        };
    }
    if prefix.is_empty() {
        // An IP address, or a `host:port`, holds no password: shown whole (an IPv6 exit id).
        if is_host_port(raw, true) {
            return raw.to_owned();
        }
        let parts: Vec<&str> = rest.splitn(4, ':').collect();
        if parts.len() == 4 {
            return format!("{}:{}:{}:{MASK}", parts[0], parts[1], parts[2]);
        }
        // Fewer fields with no port to be sure of: which one is the password is anyone's guess.
        if let Some((first, tail)) = rest.split_once(':') {
            if !tail.bytes().all(|b| b.is_ascii_digit()) {
                return format!("{first}:{MASK}");
            }
        }
    } else if let Some((user, _)) = rest.split_once(':') {
        // `scheme://user:pass` without a host: unless the text is a plain `host:port` (an IPv6
        // address has colons of its own) with a path free of `:` and `@`, hide what follows.
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        let no_password = !path.contains([':', '@']) && (is_host_port(hostport, false) || is_ip(hostport));
        if !no_password {
            return format!("{prefix}{user}:{MASK}");
        }
    }
    raw.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_hides_passwords_of_every_shape() {
        for (raw, secret) in [
            ("gw.example:8000:user:p@ss-hunter2", "hunter2"),
            ("user:hunter2://x@gw.example:8000", "hunter2"),
            ("http://user:hunter2://x@gw.example:8000", "hunter2"),
            ("gw.example:8000:user:hunter2://x", "hunter2"),
            ("bücher.example:80@0:g:hunter2", "hunter2"),
            ("@gs-a::x:hunter2:80", "hunter2"),
        ] {
            let shown = mask_raw(raw);
            assert!(!shown.contains(secret), "{raw} -> {shown}");
        }
        assert_eq!(scheme_end("http://h"), Some(7));
        assert_eq!(scheme_end("user:pw://h"), None);
    }

    #[test]
    fn mask_raw_hides_passwords_in_every_shape() {
        assert_eq!(mask_raw("http://u:pw@h:1"), "http://u:[secure]@h:1");
        assert_eq!(mask_raw("u:pw@h:1"), "u:[secure]@h:1");
        assert_eq!(mask_raw("h:1:u:p:w"), "h:1:u:[secure]");
        assert_eq!(mask_raw("h:1"), "h:1");
        assert_eq!(mask_raw("http://user:pass"), "http://user:[secure]");
        assert_eq!(mask_raw("http://h:8000/"), "http://h:8000/");
        assert_eq!(mask_raw("[::1]:8000:u:p:w"), "[::1]:8000:u:[secure]");
        // Found by fuzzing: a mangled scheme, and no `@`, still hide the password.
        assert_eq!(mask_raw("h*tps://u:hunter2gw.example:8443"), "h*tps://u:[secure]");
        assert_eq!(mask_raw("u:hunter2"), "u:[secure]");
        assert_eq!(mask_raw("x(l://ht::@&:hunter2"), "x(l://ht:[secure]");
        assert_eq!(mask_raw("l://:x:&@]P1:hunter2/:"), "l://:[secure]");
        assert_eq!(mask_raw("http://u:hunter2@[::1]:8000/"), "http://u:[secure]@[::1]:8000/");
        assert_eq!(mask_raw("http://u:hunter2@[::1]"), "http://u:[secure]@[::1]");
        assert_eq!(mask_raw("l://x:y@hunter2]"), "l://x:[secure]");
        assert_eq!(mask_raw("u:hunter2@gw.example"), "u:[secure]@gw.example");
        assert_eq!(mask_raw("t::x@&/:hunter2"), "t:[secure]");
        assert_eq!(mask_raw("h:1:u:p://w"), "h:1:u:[secure]");
        for shown in ["2001:db8::1", "[2001:db8::1]:8000", "10.0.0.1:3128", "sess-a1b2", "gw.example:8000"] {
            assert_eq!(mask_raw(shown), shown);
        }
    }

    #[test]
    fn masking_leaves_what_holds_no_password() {
        // Found in issue 13: an IPv6 zone id and an out-of-range port (with a path) were hidden.
        for shown in [
            "fe80::1%eth0",
            "fe80::1%25eth0",
            "[fe80::1%eth0]:8000",
            "http://[fe80::1%25eth0]:8000",
            "redis://127.0.0.1:99999/0",
            "redis://127.0.0.1:6379/0",
            "http://gw.example:99999",
            "gw.example:99999",
            "http://[::1]:8000/",
            "socks5://10.0.0.1:1080/",
            "0:0:0:1::",
        ] {
            assert_eq!(mask_raw(shown), shown);
        }
        // ...while whatever could still be a password stays hidden.
        for (raw, secret) in [
            ("http://user:hunter2", "hunter2"),
            ("http://user:12/hunter2:x", "hunter2"),
            ("http://user:hunter2/0", "hunter2"),
            ("fe80::1%eth0:hunter2", "hunter2"),
            ("redis://:hunter2@127.0.0.1:99999/0", "hunter2"),
            // Found by fuzzing: a password with `@ ` in it, the rest taken for the host.
            ("http://10.0.0.1:80:user:Pl@ 4nte dS3cret", "S3cret"),
            ("http://u:Pl@ 4nte dS3cret@ x", "S3cret"),
        ] {
            assert!(!mask_raw(raw).contains(secret), "{raw} -> {}", mask_raw(raw));
        }
    }
}
