//! Scanning a JSON document into its items without decoding it: each
//! item's fingerprint, kind and place, and the subtrees the memo already
//! holds taken whole (memo.rs).

use super::*;

/// A scanned document: the fingerprint of its non-entity members
/// (`_format_version`, `_transform`, ...) and its items.
pub(super) struct Scanned {
    pub(super) meta: u128,
    pub(super) items: Vec<Item>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    /// A string starting here; its span, quotes included.
    fn string(&mut self) -> Option<(usize, usize)> {
        let start = self.at;
        let mut at = start + 1;
        loop {
            at += memchr::memchr2(b'"', b'\\', self.bytes.get(at..)?)?;
            if self.bytes[at] == b'"' {
                self.at = at + 1;
                return Some((start, self.at));
            }
            at += 2;
        }
    }

    /// Skips any value; its span. Only the structure is followed: what the
    /// span holds is decoded (changed items) or known to be what an accepted
    /// document held (kept items, equal bytes).
    fn value(&mut self) -> Option<(usize, usize)> {
        let start = match self.peek()? {
            b'"' => return self.string(),
            b'{' | b'[' => self.at,
            _ => {
                let start = self.at;
                while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z') = self.bytes.get(self.at) {
                    self.at += 1;
                }
                return (self.at > start).then_some((start, self.at));
            }
        };
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.at += 1;
                        return Some((start, self.at));
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    /// Walks an object's members: `each` gets the key (without quotes, no
    /// escapes allowed) and must take the value.
    fn members(&mut self, mut each: impl FnMut(&mut Self, (usize, usize)) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let (start, end) = self.string()?;
            let key = (start + 1, end - 1);
            if self.bytes[key.0..key.1].contains(&b'\\') || !self.eat(b':') {
                return None;
            }
            each(self, key)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }
}

/// What a scan found of a top-level member (see [`top_level_member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// The object has no such member.
    Absent,
    /// Its value's byte span (the last one when repeated).
    At(usize, usize),
    /// The bytes are not an object this scan can follow (escaped keys,
    /// malformed JSON): decode them to know.
    Unclear,
}

/// Where the top-level member `name` of a JSON object sits, found without
/// decoding the rest.
pub fn top_level_member(bytes: &[u8], name: &str) -> Member {
    let mut cursor = Cursor { bytes, at: 0 };
    let mut found = Member::Absent;
    let scanned = cursor.members(|cursor, (start, end)| {
        let (value_start, value_end) = cursor.value()?;
        if &bytes[start..end] == name.as_bytes() {
            found = Member::At(value_start, value_end);
        }
        Some(())
    });
    match (scanned, cursor.peek()) {
        (Some(()), None) => found,
        _ => Member::Unclear,
    }
}

/// Scans a JSON document; `None` for anything the whole parse must see
/// (not an object, a repeated entity list, nested lists out of the order
/// `collect` takes them, escaped keys, ...). With a memo, an item whose
/// bytes (nested lists included) are those of the memorized item expected
/// at its place is taken whole from the memo, subtree and all, unread.
pub(super) fn scan(bytes: &[u8], memo: Option<&Memo>) -> Option<Scanned> {
    let scanner = Scanner { bytes, memo };
    let mut cursor = Cursor { bytes, at: 0 };
    let mut meta = Fp::new(TAG_META);
    // Lists are scanned in place; `collect` takes them in `EntityKind::ALL`
    // order, so lists written in another order are moved after.
    let mut items: Vec<Item> = Vec::with_capacity(memo.map_or(0, Memo::items));
    let mut lists: Vec<(usize, usize, usize)> = Vec::new();
    cursor.members(|cursor, (start, end)| {
        let key = std::str::from_utf8(&bytes[start..end]).ok()?;
        match EntityKind::ALL.iter().position(|kind| kind.table() == key) {
            Some(at) if lists.iter().all(|(kind, _, _)| *kind != at) => {
                let first = items.len();
                scanner.list(cursor, EntityKind::ALL[at], None, None, &mut items)?;
                lists.push((at, first, items.len()));
                Some(())
            }
            Some(_) => None,
            None => {
                let (value_start, value_end) = cursor.value()?;
                meta.text(key).bytes(&bytes[value_start..value_end]);
                Some(())
            }
        }
    })?;
    if cursor.peek().is_some() {
        return None;
    }
    if !lists.windows(2).all(|pair| pair[0].0 < pair[1].0) {
        lists.sort_by_key(|(kind, _, _)| *kind);
        let mut scanned: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let mut ordered = Vec::with_capacity(scanned.len());
        for (_, first, end) in lists {
            let offset = ordered.len();
            for slot in &mut scanned[first..end] {
                let mut item = slot.take()?;
                item.parent = item.parent.map(|parent| parent - first + offset);
                ordered.push(item);
            }
        }
        items = ordered;
    }
    for at in 0..items.len() {
        if items[at].kept.is_none() {
            items[at].fp = match items[at].parent {
                Some(parent) => chain(items[at].own, items[parent].fp),
                None => items[at].own,
            };
        }
    }
    for at in (0..items.len()).rev() {
        if let Some(parent) = items[at].parent {
            items[parent].size += items[at].size;
        }
    }
    Some(Scanned {
        meta: meta.finish(),
        items,
    })
}

struct Scanner<'a> {
    bytes: &'a [u8],
    memo: Option<&'a Memo>,
}

/// What reading one item found.
enum Read {
    Done,
    /// Its nested items were taken from the memo as the children of a fact
    /// the item turned out not to be: read it again without the memo.
    Mistaken,
}

impl Scanner<'_> {
    /// A list of `kind` items (or `null`) at the cursor, nested under
    /// `parent`, which is expected to be the memorized fact `parent_fact`
    /// (top level: `None` for both). Returns whether it took an item from
    /// the memo.
    fn list(
        &self,
        cursor: &mut Cursor<'_>,
        kind: EntityKind,
        parent: Option<usize>,
        parent_fact: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<bool> {
        match cursor.peek()? {
            b'[' => cursor.at += 1,
            _ => {
                let (start, end) = cursor.value()?;
                return (&cursor.bytes[start..end] == b"null").then_some(false);
            }
        }
        let mut expect = match (self.memo, parent, parent_fact) {
            (Some(memo), None, _) => memo.first_top(kind),
            (Some(memo), Some(_), Some(fact)) => memo.first_child(fact, kind),
            _ => None,
        };
        let mut took = false;
        if cursor.eat(b']') {
            return Some(took);
        }
        loop {
            let taken = expect.and_then(|fact| self.take(cursor, fact, kind, parent, parent_fact, items));
            match (taken, self.memo) {
                (Some(next), _) => {
                    took = true;
                    expect = Some(next);
                }
                (None, Some(memo)) => {
                    let (at, start) = (items.len(), cursor.peek().map(|_| cursor.at)?);
                    if let Read::Mistaken = self.item(cursor, kind, parent, expect, items)? {
                        items.truncate(at);
                        cursor.at = start;
                        self.item(cursor, kind, parent, None, items)?;
                    }
                    expect = memo.after(&items[at], parent_fact, expect);
                }
                (None, None) => {
                    self.item(cursor, kind, parent, None, items)?;
                }
            }
            if cursor.eat(b',') {
                continue;
            }
            return cursor.eat(b']').then_some(took);
        }
    }

    /// Takes memorized fact `fact` and its subtree for the item at the
    /// cursor when the item's bytes are the fact's; the fact expected next.
    fn take(
        &self,
        cursor: &mut Cursor<'_>,
        fact: u32,
        kind: EntityKind,
        parent: Option<usize>,
        parent_fact: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<u32> {
        let memo = self.memo?;
        let found = memo.facts.get(fact as usize)?;
        if found.kind != kind || found.parent != parent_fact.unwrap_or(NONE) {
            return None;
        }
        cursor.peek()?;
        let start = cursor.at;
        let end = start.checked_add(found.len as usize)?;
        if full_fp(kind, self.bytes.get(start..end)?) != found.full {
            return None;
        }
        cursor.at = end;
        let base = items.len();
        let first = fact as usize;
        for (at, taken) in memo.facts[first..first + found.size as usize].iter().enumerate() {
            let parent = match at {
                0 => parent,
                _ => Some(base + (taken.parent - fact) as usize),
            };
            items.push(Item {
                kind: taken.kind,
                parent,
                own: taken.own,
                fp: taken.fp,
                full: taken.full,
                start: end,
                end,
                len: taken.len,
                size: 1,
                kept: Some(fact + at as u32),
            });
        }
        Some(fact + found.size)
    }

    /// Reads one item at the cursor, expected to be memorized fact
    /// `expect` (its nested lists may then be taken from the memo).
    fn item(
        &self,
        cursor: &mut Cursor<'_>,
        kind: EntityKind,
        parent: Option<usize>,
        expect: Option<u32>,
        items: &mut Vec<Item>,
    ) -> Option<Read> {
        let bytes = cursor.bytes;
        let start = match cursor.peek()? {
            b'"' if kind == EntityKind::Snis && parent.is_some() => {
                let (start, end) = cursor.string()?;
                let own = Fp::new(TAG_NAME).kind(kind).bytes(&bytes[start..end]).finish();
                items.push(Item {
                    kind,
                    parent,
                    own,
                    fp: 0,
                    full: full_fp(kind, &bytes[start..end]),
                    start,
                    end,
                    len: (end - start) as u32,
                    size: 1,
                    kept: None,
                });
                return Some(Read::Done);
            }
            b'{' => cursor.at,
            _ => return None,
        };
        let at = items.len();
        items.push(Item {
            kind,
            parent,
            own: 0,
            fp: 0,
            full: 0,
            start,
            end: start,
            len: 0,
            size: 1,
            kept: None,
        });
        let children = nested_children(kind);
        let mut next_child = 0;
        let mut took = false;
        // The item's own bytes are everything but its nested lists' values:
        // one segment before, between and after them.
        let mut own = Fp::new(TAG_RECORD);
        own.kind(kind);
        let mut own_from = start;
        cursor.members(|cursor, (key_start, key_end)| {
            let key = &bytes[key_start..key_end];
            match children.iter().position(|(name, _, _)| name.as_bytes() == key) {
                // `collect` takes nested lists in `nested_children` order: a
                // document with another order is left to it.
                Some(child) if child >= next_child => {
                    next_child = child + 1;
                    cursor.peek()?;
                    own.bytes(&bytes[own_from..cursor.at]);
                    took |= self.list(cursor, children[child].1, Some(at), expect, items)?;
                    own_from = cursor.at;
                    Some(())
                }
                Some(_) => None,
                None => cursor.value().map(drop),
            }
        })?;
        own.bytes(&bytes[own_from..cursor.at]);
        let own = own.finish();
        let item = &mut items[at];
        item.own = own;
        item.end = cursor.at;
        item.len = u32::try_from(cursor.at - start).ok()?;
        item.full = full_fp(kind, &bytes[start..cursor.at]);
        // Nested items taken from the memo belong to `expect`: this item
        // must be that fact's own bytes (its parent is checked likewise).
        let mistaken = took
            && expect
                .and_then(|fact| self.memo?.facts.get(fact as usize))
                .map(|fact| fact.own)
                != Some(own);
        Some(if mistaken { Read::Mistaken } else { Read::Done })
    }
}
