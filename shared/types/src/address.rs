//! Which IP addresses are public, for the webhook target check and the
//! sandboxes' egress filter alike (one table, [`NON_PUBLIC_V4`]): every
//! special-purpose range of the IANA IPv4 and IPv6 registries that a
//! request must not reach is named here, and an IPv6 address that carries
//! an IPv4 one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16`) is judged by the IPv4 address it
//! carries, so `::ffff:127.0.0.1`, `::7f00:1` and `2002:7f00:1::` are all
//! loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of non-public address one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`, `fec0::/10`, local-use NAT64 `64:ff9b:1::/48`.
    Private,
    /// `100.64.0.0/10`, the carrier-grade NAT range.
    SharedNat,
    /// `169.254/16` (cloud metadata services live there), `fe80::/10`.
    LinkLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `0.0.0.0/8` ("this network"), `::`.
    Unspecified,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// Anything else set aside: `192.0.0/24`, `192.88.99/24`, `240/4`,
    /// `100::/64`, `2001::/23` (Teredo, ORCHID and other protocol
    /// assignments), `5f00::/16`, and what is outside `2000::/3`.
    Reserved,
}

impl AddressKind {
    fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::SharedNat => "shared (carrier-grade NAT)",
            Self::LinkLocal => "link-local",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Unspecified => "unspecified",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::Reserved => "reserved",
        }
    }
}

impl fmt::Display for AddressKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of non-public address `ip` is; `None` for a public one.
pub fn kind_of(ip: IpAddr) -> Option<AddressKind> {
    match ip {
        IpAddr::V4(v4) => kind_of_v4(v4),
        IpAddr::V6(v6) => kind_of_v6(v6),
    }
}

/// Every IPv4 range that is not public, as `(network, prefix length,
/// kind)`, most specific first where two overlap: the one table the webhook
/// target check and the sandboxes' egress filter both use.
pub const NON_PUBLIC_V4: &[(Ipv4Addr, u8, AddressKind)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, AddressKind::Unspecified),
    (Ipv4Addr::new(127, 0, 0, 0), 8, AddressKind::Loopback),
    (Ipv4Addr::new(10, 0, 0, 0), 8, AddressKind::Private),
    (Ipv4Addr::new(172, 16, 0, 0), 12, AddressKind::Private),
    (Ipv4Addr::new(192, 168, 0, 0), 16, AddressKind::Private),
    (Ipv4Addr::new(100, 64, 0, 0), 10, AddressKind::SharedNat),
    (Ipv4Addr::new(169, 254, 0, 0), 16, AddressKind::LinkLocal),
    (Ipv4Addr::new(192, 0, 2, 0), 24, AddressKind::Documentation),
    (Ipv4Addr::new(198, 51, 100, 0), 24, AddressKind::Documentation),
    (Ipv4Addr::new(203, 0, 113, 0), 24, AddressKind::Documentation),
    (Ipv4Addr::new(198, 18, 0, 0), 15, AddressKind::Benchmarking),
    (Ipv4Addr::new(192, 0, 0, 0), 24, AddressKind::Reserved),
    (Ipv4Addr::new(192, 88, 99, 0), 24, AddressKind::Reserved),
    (Ipv4Addr::new(224, 0, 0, 0), 4, AddressKind::Multicast),
    (Ipv4Addr::new(255, 255, 255, 255), 32, AddressKind::Broadcast),
    (Ipv4Addr::new(240, 0, 0, 0), 4, AddressKind::Reserved),
];

/// Whether `ip` is inside `network/prefix`.
pub fn in_prefix(ip: Ipv4Addr, network: Ipv4Addr, prefix: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
    u32::from(ip) & mask == u32::from(network) & mask
}

fn kind_of_v4(ip: Ipv4Addr) -> Option<AddressKind> {
    NON_PUBLIC_V4.iter().find(|(network, prefix, _)| in_prefix(ip, *network, *prefix)).map(|(_, _, kind)| *kind)
}

fn kind_of_v6(ip: Ipv6Addr) -> Option<AddressKind> {
    use AddressKind::*;
    if let Some(v4) = embedded_v4(ip) {
        return kind_of_v4(v4);
    }
    let s = ip.segments();
    let kind = match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => Unspecified,
        [0, 0, 0, 0, 0, 0, 0, 1] => Loopback,
        [0xff00..=0xffff, ..] => Multicast,
        [0xfe80..=0xfebf, ..] => LinkLocal,
        [0xfec0..=0xfeff, ..] | [0xfc00..=0xfdff, ..] => Private,
        [0x64, 0xff9b, 1, ..] => Private,
        [0x2001, 0xdb8, ..] | [0x3fff, 0..=0x0fff, ..] => Documentation,
        [0x2001, 2, 0, ..] => Benchmarking,
        [0x2001, 0..=0x1ff, ..] => Reserved,
        [0x100, 0, 0, 0, ..] => Reserved,
        [0x5f00, ..] => Reserved,
        // Global unicast is `2000::/3`; everything outside it that is not
        // named above is unassigned or set aside.
        [first, ..] if first & 0xe000 != 0x2000 => Reserved,
        _ => return None,
    };
    Some(kind)
}

/// The IPv4 address an IPv6 one carries: IPv4-mapped `::ffff:0:0/96`,
/// IPv4-compatible `::/96` (but `::` and `::1`), NAT64 `64:ff9b::/96` and
/// 6to4 `2002::/16`.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::AddressKind::*;
    use super::*;

    /// Every range the check must refuse, by example, with its kind.
    const TABLE: &[(&str, Option<AddressKind>)] = &[
        ("0.0.0.0", Some(Unspecified)),
        ("0.1.2.3", Some(Unspecified)),
        ("127.0.0.1", Some(Loopback)),
        ("127.255.255.254", Some(Loopback)),
        ("10.0.0.1", Some(Private)),
        ("172.16.0.1", Some(Private)),
        ("172.31.255.255", Some(Private)),
        ("192.168.1.1", Some(Private)),
        ("100.64.0.1", Some(SharedNat)),
        ("100.127.255.255", Some(SharedNat)),
        ("169.254.169.254", Some(LinkLocal)),
        ("192.0.0.8", Some(Reserved)),
        ("192.0.2.1", Some(Documentation)),
        ("198.51.100.7", Some(Documentation)),
        ("203.0.113.9", Some(Documentation)),
        ("198.18.0.1", Some(Benchmarking)),
        ("198.19.255.255", Some(Benchmarking)),
        ("192.88.99.1", Some(Reserved)),
        ("224.0.0.1", Some(Multicast)),
        ("239.255.255.250", Some(Multicast)),
        ("240.0.0.1", Some(Reserved)),
        ("255.255.255.255", Some(Broadcast)),
        ("::", Some(Unspecified)),
        ("::1", Some(Loopback)),
        ("::ffff:127.0.0.1", Some(Loopback)),
        ("::ffff:10.0.0.1", Some(Private)),
        ("::ffff:169.254.169.254", Some(LinkLocal)),
        ("::7f00:1", Some(Loopback)),
        ("::a00:1", Some(Private)),
        ("64:ff9b::7f00:1", Some(Loopback)),
        ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
        ("64:ff9b:1::1", Some(Private)),
        ("2002:7f00:1::", Some(Loopback)),
        ("2002:a00:1::1", Some(Private)),
        ("2002:a9fe:a9fe::", Some(LinkLocal)),
        ("2001:db8::1", Some(Documentation)),
        ("3fff::1", Some(Documentation)),
        ("2001:2::1", Some(Benchmarking)),
        ("2001::1", Some(Reserved)),
        ("100::1", Some(Reserved)),
        ("fc00::1", Some(Private)),
        ("fd12:3456::1", Some(Private)),
        ("fec0::1", Some(Private)),
        ("fe80::1", Some(LinkLocal)),
        ("febf::1", Some(LinkLocal)),
        ("ff02::1", Some(Multicast)),
        ("ff0e::1", Some(Multicast)),
        ("4000::1", Some(Reserved)),
        // Public: the check lets these through.
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("198.20.0.1", None),
        ("2606:4700::1111", None),
        ("2a00:1450:4001::1", None),
        ("::ffff:93.184.216.34", None),
        ("64:ff9b::808:808", None),
        ("2002:5db8:d822::1", None),
    ];

    #[test]
    fn every_special_purpose_range_has_its_kind_and_public_addresses_have_none() {
        for (text, kind) in TABLE {
            let ip: IpAddr = text.parse().expect("an address");
            assert_eq!(kind_of(ip), *kind, "{text}");
        }
    }

    proptest::proptest! {
        /// An IPv6 address carrying an IPv4 one is of that one's kind, in
        /// each of the forms that carry it.
        #[test]
        fn an_embedded_ipv4_address_is_judged_as_itself(bits: u32) {
            let v4 = Ipv4Addr::from(bits);
            let [hi, lo] = [(bits >> 16) as u16, bits as u16];
            let forms = [
                v4.to_ipv6_mapped(),
                Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
                Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
            ];
            for v6 in forms {
                proptest::prop_assert_eq!(kind_of(IpAddr::V6(v6)), kind_of(IpAddr::V4(v4)), "{}", v6);
            }
            if bits > 1 {
                let compatible = Ipv6Addr::new(0, 0, 0, 0, 0, 0, hi, lo);
                proptest::prop_assert_eq!(kind_of(IpAddr::V6(compatible)), kind_of(IpAddr::V4(v4)), "{}", compatible);
            }
        }

        /// Whatever the standard library knows to be non-public is refused.
        #[test]
        fn what_std_calls_special_is_never_public(bits: u32, v6bits: u128) {
            let v4 = Ipv4Addr::from(bits);
            let special = v4.is_private() || v4.is_loopback() || v4.is_link_local() || v4.is_multicast()
                || v4.is_broadcast() || v4.is_documentation() || v4.is_unspecified();
            if special {
                proptest::prop_assert!(kind_of(IpAddr::V4(v4)).is_some(), "{}", v4);
            }
            let v6 = Ipv6Addr::from(v6bits);
            if v6.is_loopback() || v6.is_unspecified() || v6.is_multicast() || v6.is_unique_local() || v6.is_unicast_link_local() {
                proptest::prop_assert!(kind_of(IpAddr::V6(v6)).is_some(), "{}", v6);
            }
        }
    }
}
