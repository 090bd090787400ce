//! A request's StatsD lines kept as numbers ([`LineTemplate`], [`Templated`]).
//!
//! Requests of one key (a plugin's: the same plugin instance, entities and
//! status) write the same lines but for their values. The first request of
//! a key in a flush window makes the lines' template (the text around each
//! value); every later one adds its numbers: a counter's value to the
//! line's sum, a timer's (histogram's, distribution's) to the values the
//! window sends a line each, a gauge's to the window's gauge values in the
//! order requests came. A line without a value of the request's (a set's
//! member) is sent once. At the flush the shipping thread writes the lines
//! ([`Templated::write`]) and merges those a merge can change with any
//! text lines ([`super::aggregate::merge`]), so the datagrams are the ones
//! the text lines would have made: counters summed, sets once, gauges
//! last, the rest each.

use foldhash::HashMap;

/// How a template line's values combine within a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A counter: one line with the sum.
    Sum,
    /// A line per request (timers, histograms, distributions): no merge
    /// changes it, so it is written after the merged lines.
    Each,
    /// A line per request that the merge keeps the last of (a gauge).
    Gauge,
    /// The line as it is, once (its value is part of its text: a set).
    Whole,
}

#[derive(Debug, Clone)]
struct TemplateLine {
    /// The text before the value (the whole line for [`Kind::Whole`]).
    head: Box<[u8]>,
    /// The text after the value (`|c|@0.5`, `|ms|#tags`).
    tail: Box<[u8]>,
    /// Which of the request's values goes in the line.
    value: usize,
    kind: Kind,
}

/// The lines a request of one key writes, around their values.
#[derive(Debug, Clone, Default)]
pub struct LineTemplate {
    lines: Vec<TemplateLine>,
    /// How many lines are [`Kind::Each`].
    each: usize,
    /// Bytes a request adds to the window (its [`Kind::Each`] lines).
    each_bytes: usize,
    /// Bytes of the lines sent once a window.
    once_bytes: usize,
}

impl LineTemplate {
    /// A line `head` + the request's value number `value` + `tail`, of
    /// StatsD type `letter`: a counter (`c`) is summed within a window, a
    /// gauge (`g`) merged to its last value, any other sent each time.
    pub fn line(&mut self, head: &[u8], value: usize, tail: &[u8], letter: &str) {
        let kind = match letter {
            "c" => Kind::Sum,
            "g" => Kind::Gauge,
            _ => Kind::Each,
        };
        self.push(head, value, tail, kind);
    }

    /// A line whose text does not change with the request's values (a
    /// set's member), sent once a window.
    pub fn whole(&mut self, line: &[u8]) {
        self.push(line, 0, b"", Kind::Whole);
    }

    fn push(&mut self, head: &[u8], value: usize, tail: &[u8], kind: Kind) {
        let bytes = head.len() + tail.len() + 21;
        match kind {
            Kind::Each => {
                self.each += 1;
                self.each_bytes += bytes;
            }
            Kind::Gauge => self.each_bytes += bytes,
            Kind::Sum | Kind::Whole => self.once_bytes += bytes,
        }
        self.lines.push(TemplateLine {
            head: head.into(),
            tail: tail.into(),
            value,
            kind,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// One key's requests within a window.
#[derive(Debug)]
struct Accum {
    template: LineTemplate,
    /// Per line: a counter's sum (other lines keep 0).
    sums: Vec<i64>,
    /// The [`Kind::Each`] lines' values, request after request.
    each: Vec<i64>,
}

/// What one buffer holds of templated requests until the next flush.
#[derive(Debug, Default)]
pub struct Templated {
    keys: HashMap<u64, usize>,
    accums: Vec<Accum>,
    /// Gauge values in the order requests came (the merge keeps the last
    /// of a name, whichever key's request it was): key, line, value.
    gauges: Vec<(u32, u32, i64)>,
    /// What the lines will take, about (bounds the buffer like its text).
    bytes: usize,
}

impl Templated {
    /// Adds one request of `key` with its `values` (indexed by the
    /// template's lines' value numbers; a number past the end counts 0).
    /// `make` makes the key's template when this window has none; a
    /// template without lines keeps nothing. Returns the bytes added.
    pub fn add(&mut self, key: u64, values: &[i64], make: impl FnOnce() -> LineTemplate) -> usize {
        let at = match self.keys.get(&key) {
            Some(&at) => at,
            None => {
                let template = make();
                let at = self.accums.len();
                self.keys.insert(key, at);
                self.bytes += template.once_bytes;
                self.accums.push(Accum {
                    sums: vec![0; template.lines.len()],
                    each: Vec::with_capacity(template.each * 16),
                    template,
                });
                at
            }
        };
        let accum = &mut self.accums[at];
        for (number, (line, sum)) in accum.template.lines.iter().zip(accum.sums.iter_mut()).enumerate() {
            let value = values.get(line.value).copied().unwrap_or(0);
            match line.kind {
                Kind::Sum => *sum = sum.saturating_add(value),
                Kind::Each => accum.each.push(value),
                Kind::Gauge => self.gauges.push((at as u32, number as u32, value)),
                Kind::Whole => {}
            }
        }
        let added = accum.template.each_bytes;
        self.bytes += added;
        added
    }

    /// About how many bytes the lines will take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.accums.is_empty()
    }

    /// Writes the lines, `\n`-separated: into `merge` those a merge may
    /// change (per key its sums and whole lines once, then every gauge
    /// value in the order the requests came), into `each` those it leaves
    /// as they are (each request's timers, histograms and distributions),
    /// which need not go through it.
    pub fn write(&self, merge: &mut Vec<u8>, each: &mut Vec<u8>) {
        let mut digits = itoa::Buffer::new();
        let mut line_out = |out: &mut Vec<u8>, head: &[u8], value: Option<i64>, tail: &[u8]| {
            if !out.is_empty() {
                out.push(b'\n');
            }
            out.extend_from_slice(head);
            if let Some(value) = value {
                out.extend_from_slice(digits.format(value).as_bytes());
            }
            out.extend_from_slice(tail);
        };
        for accum in &self.accums {
            let lines = &accum.template.lines;
            for (line, sum) in lines.iter().zip(&accum.sums) {
                match line.kind {
                    Kind::Sum => line_out(merge, &line.head, Some(*sum), &line.tail),
                    Kind::Whole => line_out(merge, &line.head, None, b""),
                    Kind::Each | Kind::Gauge => {}
                }
            }
            if accum.template.each == 0 {
                continue;
            }
            let each_lines = lines.iter().filter(|line| line.kind == Kind::Each);
            for request in accum.each.chunks_exact(accum.template.each) {
                for (line, value) in each_lines.clone().zip(request) {
                    line_out(each, &line.head, Some(*value), &line.tail);
                }
            }
        }
        for &(at, number, value) in &self.gauges {
            let line = &self.accums[at as usize].template.lines[number as usize];
            line_out(merge, &line.head, Some(value), &line.tail);
        }
    }

    /// Empties it, keeping its allocations for the next window.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.accums.clear();
        self.gauges.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> LineTemplate {
        let mut t = LineTemplate::default();
        t.line(b"kong.service.a.request.count:", 6, b"|c", "c");
        t.line(b"kong.service.a.latency:", 1, b"|ms", "ms");
        t.whole(b"kong.service.a.user.uniques:ada|s");
        t.line(b"kong.service.a.request.size:", 2, b"|c|@0.5", "c");
        t.line(b"kong.latency:", 1, b"|ms|#service:a", "ms");
        t.line(b"kong.mem:", 2, b"|g", "g");
        t
    }

    /// Written and merged, the requests' templates send what their text
    /// lines, merged, would have sent.
    #[test]
    fn templated_requests_send_what_their_lines_would_have() {
        let requests: [(u64, [i64; 7]); 3] = [
            (1, [1, 12, 100, 0, 0, 0, 1]),
            (2, [1, 7, 5, 0, 0, 0, 1]),
            (1, [1, 9, 40, 0, 0, 0, 1]),
        ];
        let mut text = Vec::new();
        let mut templated = Templated::default();
        let mut made = 0;
        for (key, values) in requests {
            let t = template();
            for line in &t.lines {
                if !text.is_empty() {
                    text.push(b'\n');
                }
                text.extend_from_slice(&line.head);
                if line.kind != Kind::Whole {
                    text.extend_from_slice(values[line.value].to_string().as_bytes());
                }
                text.extend_from_slice(&line.tail);
            }
            templated.add(key, &values, || {
                made += 1;
                t
            });
        }
        assert_eq!(made, 2, "a template per key");
        let (mut written, mut each) = (Vec::new(), Vec::new());
        templated.write(&mut written, &mut each);
        let merge = |lines: &[u8], each: &[u8]| {
            let mut out = Vec::new();
            crate::logs::aggregate::merge(lines.split(|b| *b == b'\n'), &mut out);
            let mut lines: Vec<String> = String::from_utf8(out)
                .unwrap()
                .split('\n')
                .map(str::to_string)
                .collect();
            let each = String::from_utf8(each.to_vec()).unwrap();
            lines.extend(each.split('\n').filter(|l| !l.is_empty()).map(str::to_string));
            lines.sort();
            lines
        };
        let got = merge(&written, &each);
        assert_eq!(got, merge(&text, b""));
        assert!(got.contains(&"kong.service.a.request.count:3|c".to_string()));
        assert!(got.contains(&"kong.service.a.request.size:145|c|@0.5".to_string()));
        assert!(got.contains(&"kong.mem:40|g".to_string()), "the last gauge: {got:?}");
        assert!(!String::from_utf8(each).unwrap().contains("|g"));
        assert!(templated.bytes() > 0);
        templated.clear();
        assert!(templated.is_empty());
        let (mut none, mut each) = (Vec::new(), Vec::new());
        templated.write(&mut none, &mut each);
        assert!(none.is_empty() && each.is_empty());
    }
}
