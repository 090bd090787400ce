//! Load balancing over an upstream entity's targets: weighted round-robin.
//!
//! A [`Balancer`] is built per upstream when the snapshot is compiled; picking
//! a target is one atomic increment.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Most slots a weighted ring may have; weights are scaled down to fit.
const MAX_SLOTS: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAddress {
    pub host: String,
    pub port: u16,
}

#[derive(Debug)]
pub struct Balancer {
    pub upstream_name: String,
    pub host_header: Option<String>,
    targets: Vec<TargetAddress>,
    /// Indexes into `targets`, each repeated in proportion to its weight.
    ring: Vec<usize>,
    next: AtomicUsize,
}

/// Parse `host:port`, `[v6]:port`, or a bare host (port 8000, Kong's default).
pub fn parse_target(target: &str) -> Option<TargetAddress> {
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => 8000,
        };
        return Some(TargetAddress {
            host: host.to_string(),
            port,
        });
    }
    match target.rsplit_once(':') {
        Some((host, port)) => Some(TargetAddress {
            host: host.to_string(),
            port: port.parse().ok()?,
        }),
        None => Some(TargetAddress {
            host: target.to_string(),
            port: 8000,
        }),
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Balancer {
    pub fn new(upstream_name: String, host_header: Option<String>, weighted: Vec<(TargetAddress, u64)>) -> Balancer {
        let weighted: Vec<_> = weighted.into_iter().filter(|(_, w)| *w > 0).collect();
        let divisor = weighted.iter().fold(0, |acc, (_, w)| gcd(acc, *w)).max(1);
        let total: u64 = weighted.iter().map(|(_, w)| w / divisor).sum();
        let scale = total.div_ceil(MAX_SLOTS).max(1);
        let mut ring = Vec::new();
        let mut targets = Vec::new();
        for (index, (target, weight)) in weighted.into_iter().enumerate() {
            let slots = ((weight / divisor) / scale).max(1);
            ring.extend(std::iter::repeat_n(index, slots as usize));
            targets.push(target);
        }
        // Interleave so consecutive picks spread over targets.
        ring.sort_by_key(|&i| i);
        let interleaved = interleave(&ring, targets.len());
        Balancer {
            upstream_name,
            host_header,
            targets,
            ring: interleaved,
            next: AtomicUsize::new(0),
        }
    }

    /// The next target in weighted round-robin order; `None` when no target has weight.
    pub fn pick(&self) -> Option<&TargetAddress> {
        if self.ring.is_empty() {
            return None;
        }
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.ring.len();
        self.targets.get(self.ring[slot])
    }

    pub fn target_count(&self) -> usize {
        self.targets.len()
    }
}

/// Spread repeated indexes: round by round, take one of each index that still has slots.
fn interleave(sorted_ring: &[usize], target_count: usize) -> Vec<usize> {
    let mut remaining = vec![0usize; target_count];
    for &i in sorted_ring {
        remaining[i] += 1;
    }
    let mut out = Vec::with_capacity(sorted_ring.len());
    while out.len() < sorted_ring.len() {
        for (index, left) in remaining.iter_mut().enumerate() {
            if *left > 0 {
                *left -= 1;
                out.push(index);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn addr(host: &str, port: u16) -> TargetAddress {
        TargetAddress {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn weights_are_respected_and_zero_weight_is_skipped() {
        let b = Balancer::new(
            "u".into(),
            None,
            vec![(addr("a", 1), 300), (addr("b", 2), 100), (addr("c", 3), 0)],
        );
        let mut counts = HashMap::new();
        for _ in 0..400 {
            *counts.entry(b.pick().expect("target").host.clone()).or_insert(0) += 1;
        }
        assert_eq!(counts.get("a"), Some(&300));
        assert_eq!(counts.get("b"), Some(&100));
        assert_eq!(counts.get("c"), None);
    }

    #[test]
    fn empty_balancer_has_no_peer() {
        let b = Balancer::new("u".into(), None, vec![]);
        assert!(b.pick().is_none());
    }

    #[test]
    fn targets_parse_like_kong() {
        assert_eq!(parse_target("10.0.0.1:80"), Some(addr("10.0.0.1", 80)));
        assert_eq!(parse_target("example.com"), Some(addr("example.com", 8000)));
        assert_eq!(parse_target("[::1]:9000"), Some(addr("::1", 9000)));
        assert_eq!(parse_target("host:notaport"), None);
    }
}
