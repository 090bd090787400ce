//! Kong's HTTP-family protocol names (`http`, `https`, `grpc`, `grpcs`) as
//! a value and a bit set, read once when a route or plugin is compiled.

/// The protocol a request arrived on, as route and plugin `protocols` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
    Grpc,
    Grpcs,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Grpc => "grpc",
            Protocol::Grpcs => "grpcs",
        }
    }

    const fn bit(self) -> u8 {
        match self {
            Protocol::Http => 1,
            Protocol::Https => 2,
            Protocol::Grpc => 4,
            Protocol::Grpcs => 8,
        }
    }
}

/// A route's or plugin's `protocols` as a bit set, checked per request with one AND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolSet(u8);

impl ProtocolSet {
    pub const ALL: ProtocolSet = ProtocolSet(0b1111);

    /// From Kong protocol names; names without an HTTP meaning (`ws`, `tcp`,
    /// ...) add nothing.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> ProtocolSet {
        let mut bits = 0;
        for name in names {
            bits |= match name {
                "http" => Protocol::Http.bit(),
                "https" => Protocol::Https.bit(),
                "grpc" => Protocol::Grpc.bit(),
                "grpcs" => Protocol::Grpcs.bit(),
                _ => 0,
            };
        }
        ProtocolSet(bits)
    }

    /// The protocols of requests on plain-text connections.
    pub const PLAIN: ProtocolSet = ProtocolSet(Protocol::Http.bit() | Protocol::Grpc.bit());
    /// The protocols of requests on TLS connections.
    pub const TLS: ProtocolSet = ProtocolSet(Protocol::Https.bit() | Protocol::Grpcs.bit());

    pub fn contains(self, protocol: Protocol) -> bool {
        self.0 & protocol.bit() != 0
    }

    /// Whether the two sets share a protocol.
    pub fn intersects(self, other: ProtocolSet) -> bool {
        self.0 & other.0 != 0
    }
}
