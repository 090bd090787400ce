//! StatsD lines merged per flush, as a StatsD server would merge them.
//!
//! A line is `<name>:<value>|<type>[|@<rate>][|#<tags>]` (tags in the name
//! for the InfluxDB, Librato and SignalFX styles). Within one flush:
//!
//! - counters (`c`) with the same name and everything after the value are
//!   summed: `n` lines of `1|c|@0.5` and one of `n|c|@0.5` count the same
//!   on the server, which scales each by the rate it carries;
//! - set members (`s`) are sent once each: a set counts distinct members;
//! - absolute gauges (`g`) keep the last value, the one the server keeps;
//!   a signed gauge (`+3|g`, a change) is sent as it came;
//! - timers, histograms, distributions and anything this does not parse
//!   are sent as they came, in order: each value is a sample.
//!
//! Lines come out in the order their name first came in.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

enum Merged<'a> {
    /// A counter's sum, then the line's text after its value.
    Sum(&'a [u8], i64, &'a [u8]),
    /// An absolute gauge's last value.
    Last(&'a [u8], &'a [u8], &'a [u8]),
    /// The line as it came.
    Line(&'a [u8]),
}

/// `name`, `value` and the rest (from the `|` before the type) of a line.
fn split(line: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let colon = memchr::memchr(b':', line)?;
    let (name, after) = (&line[..colon], &line[colon + 1..]);
    let bar = memchr::memchr(b'|', after)?;
    Some((name, &after[..bar], &after[bar..]))
}

fn stat_type(rest: &[u8]) -> &[u8] {
    let rest = &rest[1..];
    &rest[..memchr::memchr(b'|', rest).unwrap_or(rest.len())]
}

/// Appends the merged form of `lines` to `out`, `\n`-separated.
pub fn merge<'a>(lines: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let mut merged: Vec<Merged<'a>> = Vec::new();
    // (name, rest) of a counter or gauge, and its place in `merged`.
    let mut slots: HashMap<(&'a [u8], &'a [u8]), usize> = HashMap::new();
    let mut members: HashSet<&'a [u8]> = HashSet::new();
    for line in lines.filter(|line| !line.is_empty()) {
        let Some((name, value, rest)) = split(line) else {
            merged.push(Merged::Line(line));
            continue;
        };
        match stat_type(rest) {
            b"c" => {
                let Some(count) = std::str::from_utf8(value).ok().and_then(|v| v.parse::<i64>().ok()) else {
                    merged.push(Merged::Line(line));
                    continue;
                };
                match slots.get(&(name, rest)) {
                    Some(&at) => {
                        if let Merged::Sum(_, sum, _) = &mut merged[at] {
                            *sum = sum.saturating_add(count);
                        }
                    }
                    None => {
                        slots.insert((name, rest), merged.len());
                        merged.push(Merged::Sum(name, count, rest));
                    }
                }
            }
            b"g" if !value.starts_with(b"+") && !value.starts_with(b"-") => match slots.get(&(name, rest)) {
                Some(&at) => merged[at] = Merged::Last(name, value, rest),
                None => {
                    slots.insert((name, rest), merged.len());
                    merged.push(Merged::Last(name, value, rest));
                }
            },
            b"s" => {
                if members.insert(line) {
                    merged.push(Merged::Line(line));
                }
            }
            _ => merged.push(Merged::Line(line)),
        }
    }
    for line in merged {
        if !out.is_empty() {
            out.push(b'\n');
        }
        match line {
            Merged::Sum(name, sum, rest) => {
                out.extend_from_slice(name);
                out.push(b':');
                out.extend_from_slice(itoa::Buffer::new().format(sum).as_bytes());
                out.extend_from_slice(rest);
            }
            Merged::Last(name, value, rest) => {
                out.extend_from_slice(name);
                out.push(b':');
                out.extend_from_slice(value);
                out.extend_from_slice(rest);
            }
            Merged::Line(line) => out.extend_from_slice(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(lines: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        merge(lines.iter().map(|l| l.as_bytes()), &mut out);
        String::from_utf8(out)
            .unwrap()
            .split('\n')
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn counters_sum_sets_dedupe_gauges_keep_the_last_and_timers_stay() {
        let lines = [
            "kong.service.a.request.count:1|c",
            "kong.service.a.latency:12|ms",
            "kong.service.a.user.uniques:ada|s",
            "kong.service.a.request.count:1|c|@0.5",
            "kong.service.a.request.count:1|c",
            "kong.service.a.latency:9|ms",
            "kong.service.a.user.uniques:ada|s",
            "kong.service.a.user.uniques:bob|s",
            "kong.mem:10|g",
            "kong.mem:12|g",
            "kong.mem:+3|g",
            "kong.service.a.request.count:1|c",
        ];
        assert_eq!(
            merged(&lines),
            [
                "kong.service.a.request.count:3|c",
                "kong.service.a.latency:12|ms",
                "kong.service.a.user.uniques:ada|s",
                "kong.service.a.request.count:1|c|@0.5",
                "kong.service.a.latency:9|ms",
                "kong.service.a.user.uniques:bob|s",
                "kong.mem:12|g",
                "kong.mem:+3|g",
            ]
        );
    }

    #[test]
    fn tags_in_either_place_keep_counters_apart() {
        let lines = [
            "kong.request.count:1|c|#service:a,status:200",
            "kong.request.count:1|c|#service:a,status:500",
            "kong.request.count:1|c|#service:a,status:200",
            "kong.request.count,service=a:1|c",
            "kong.request.count,service=b:1|c",
            "kong.request.count,service=a:4|c",
        ];
        assert_eq!(
            merged(&lines),
            [
                "kong.request.count:2|c|#service:a,status:200",
                "kong.request.count:1|c|#service:a,status:500",
                "kong.request.count,service=a:5|c",
                "kong.request.count,service=b:1|c",
            ]
        );
    }

    #[test]
    fn what_does_not_parse_goes_as_it_came() {
        let lines = ["no-colon-here", "odd:value|c", "odd:value|c", "x:1"];
        assert_eq!(merged(&lines), ["no-colon-here", "odd:value|c", "odd:value|c", "x:1"]);
    }
}
