//! `ip-restriction` (Kong priority 990): deny, then allow, by IPv4/IPv6
//! address or CIDR of the client.

mod schema;

/// `ip-restriction` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ip-restriction",
    priority: 990,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(IpRestriction::from_config(config)?)),
};

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

/// An address block: network bits and prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Cidr { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, ip) => ip,
        };
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[derive(Debug)]
pub struct IpRestriction {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
    status: u16,
    message: Option<String>,
}

fn cidrs(c: &ConfigReader<'_>, field: &str) -> Result<Vec<Cidr>, PluginError> {
    c.strings(field)?
        .iter()
        .map(|text| {
            Cidr::parse(text).ok_or_else(|| PluginError::invalid(field, format!("invalid ip or cidr range: '{text}'")))
        })
        .collect()
}

impl IpRestriction {
    pub fn from_config(config: &Map<String, Value>) -> Result<IpRestriction, PluginError> {
        let c = ConfigReader::new(config);
        let status = c.number("status", 403.0)?;
        if !(100.0..=599.0).contains(&status) {
            return Err(PluginError::invalid("status", "value should be between 100 and 599"));
        }
        Ok(IpRestriction {
            allow: cidrs(&c, "allow")?,
            deny: cidrs(&c, "deny")?,
            status: status as u16,
            message: c.string("message")?,
        })
    }
}

impl Plugin for IpRestriction {
    fn name(&self) -> &'static str {
        "ip-restriction"
    }

    fn priority(&self) -> i32 {
        990
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let ip = ctx.client_ip;
        let denied = self.deny.iter().any(|c| c.contains(ip));
        let not_allowed = !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(ip));
        if denied || not_allowed {
            let message = match &self.message {
                Some(message) => message.clone(),
                None => format!("IP address not allowed: {ip}"),
            };
            return Flow::Respond(PluginResponse::message(self.status, &message));
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_match_v4_v6_and_mapped() {
        let block = Cidr::parse("10.1.0.0/16").expect("cidr");
        assert!(block.contains("10.1.200.3".parse().expect("ip")));
        assert!(!block.contains("10.2.0.1".parse().expect("ip")));
        assert!(block.contains("::ffff:10.1.0.9".parse().expect("ip")));
        let v6 = Cidr::parse("2001:db8::/32").expect("cidr");
        assert!(v6.contains("2001:db8:1::1".parse().expect("ip")));
        assert!(Cidr::parse("0.0.0.0/0")
            .expect("cidr")
            .contains("8.8.8.8".parse().expect("ip")));
        assert!(Cidr::parse("1.2.3.4/33").is_none());
        assert!(Cidr::parse("nope").is_none());
    }
}
