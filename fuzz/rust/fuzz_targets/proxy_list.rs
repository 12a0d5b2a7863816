//! The proxy-list parser, `ProxyUrl::parse` and `mask_raw` on any text never panic, and a
//! password planted in a proxy never shows in an exit id, a rendering of a parsed exit or an
//! error message. The planted shapes follow `fuzz/_plant.py`: the password sits where every
//! shape of the parser reads one, and the fragments around it cannot carry it or move it.
#![no_main]

use exitpool::{mask_raw, parse_proxy_list, ProxyUrl};
use libfuzzer_sys::fuzz_target;
use percent_encoding::percent_decode_str;

const PLANT: &str = "Pl4ntedS3cret";
const SCHEMES: &[&str] = &["http", "https", "socks5", "socks5h", "HTTP", "ftp", "socks4", ""];
const HOSTS: &[&str] = &["gw.example", "10.0.0.1", "[::1]", "[2001:db8::7]", "xn--bcher-kva.example", "localhost", ""];
const USERS: &[&str] = &["user", "user-sess-1", "u", "", "user%40x", "ü"];

/// Fuzzer bytes read as choices and short strings.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }
    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[self.byte() as usize % from.len()]
    }
    fn number(&mut self, max: u32) -> u32 {
        (u32::from(self.byte()) << 8 | u32::from(self.byte())) % (max + 1)
    }
    /// Up to `limit` bytes as text, with no whitespace (a token boundary), none of `forbid`,
    /// and no PLANT.
    fn fragment(&mut self, limit: usize, forbid: &str) -> String {
        let n = (self.byte() as usize % (limit + 1)).min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        let mut s: String = String::from_utf8_lossy(head).chars().filter(|c| !c.is_whitespace() && !forbid.contains(*c)).collect();
        while s.contains(PLANT) {
            s = s.replace(PLANT, "");
        }
        s
    }
}

/// A proxy in one of the shapes proxy lists use, its password holding PLANT.
fn planted(b: &mut Bytes) -> String {
    let shape = b.byte() % 3;
    let well_formed = b.flag();
    let mut password = format!("{PLANT}{}", b.fragment(6, ""));
    if b.flag() {
        password = password
            .chars()
            .map(|c| {
                if b.flag() {
                    percent_encoding::utf8_percent_encode(&c.to_string(), percent_encoding::NON_ALPHANUMERIC).to_string()
                } else {
                    c.to_string()
                }
            })
            .collect();
    }
    let (user, host, port) = if well_formed {
        (b.pick(USERS).to_owned(), b.pick(&HOSTS[..HOSTS.len() - 1]).to_owned(), (1 + b.number(65534)).to_string())
    } else {
        let user = b.fragment(8, if shape == 2 { "=:" } else { "=" });
        // A `host:port:user:pass` line whose host and port read `http://...` is a URL to every
        // reader (its password is what follows the first `:` after `//`): no `/` there.
        let around = if shape == 1 { "=/" } else { "=" };
        let host = if b.flag() { b.pick(HOSTS).to_owned() } else { b.fragment(12, around) };
        let port = if b.flag() { b.number(70000).to_string() } else { b.fragment(5, around) };
        (user, host, port)
    };
    match shape {
        0 => {
            let scheme = b.pick(if well_formed { &SCHEMES[..4] } else { SCHEMES });
            let tail = if !well_formed && b.flag() { b.fragment(4, "=") } else { String::new() };
            format!("{scheme}://{user}:{password}@{host}:{port}{tail}")
        }
        1 => format!("{host}:{port}:{user}:{password}"),
        _ => format!("{user}:{password}@{host}:{port}"),
    }
}

fn check(where_: &str, text: &str, input: &dyn std::fmt::Debug) {
    let decoded = percent_decode_str(text).decode_utf8_lossy();
    assert!(!text.contains(PLANT) && !decoded.contains(PLANT), "the planted password appears in {where_}: {text:?} (input: {input:?})");
}

fn check_parsed(lines: &[&str]) {
    match parse_proxy_list(lines) {
        Ok(exits) => {
            for e in exits {
                check("an exit id", &e.id, &lines);
                check("an exit's Debug", &format!("{e:?}"), &lines);
                check("a masked proxy URL", &e.proxy.to_string(), &lines);
            }
        }
        Err(e) => check("an error message", &e.to_string(), &lines),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        // Any text: nothing panics.
        let text = String::from_utf8_lossy(rest);
        let lines: Vec<&str> = text.lines().collect();
        let _ = parse_proxy_list(&lines);
        let _ = ProxyUrl::parse(&text);
        let _ = mask_raw(&text);
        return;
    }
    let mut b = Bytes(rest);
    let mut lines = Vec::new();
    for _ in 0..1 + b.byte() % 3 {
        let proxy = planted(&mut b);
        match ProxyUrl::parse(&proxy) {
            Ok(p) => {
                check("a masked proxy URL", &p.to_string(), &proxy);
                check("a proxy URL's Debug", &format!("{p:?}"), &proxy);
            }
            Err(e) => check("an error message", &e.to_string(), &proxy),
        }
        check("mask_raw", &mask_raw(&proxy), &proxy);
        // An id column before it: plain, or another planted proxy (one that must never pass
        // for an id); fields after it.
        let id = match b.byte() % 3 {
            0 => String::new(),
            1 => format!("{} ", b.fragment(10, "=#")),
            _ => format!("{} ", planted(&mut b)),
        };
        let fields = if b.flag() { format!(" capacity={} ip={}", b.fragment(3, ""), b.fragment(8, "")) } else { String::new() };
        lines.push(format!("{id}{proxy}{fields}"));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    check_parsed(&refs);
});
