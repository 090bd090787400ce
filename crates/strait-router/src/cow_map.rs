//! A hash map that is cheap to clone and cheap to change after cloning.
//!
//! Routers are shared immutably by snapshots and each configuration change
//! derives a new router from the previous one. `CowMap` splits its entries
//! into shards, each behind an `Arc`: cloning the map copies one pointer per
//! shard, and changing a clone copies only the shard it touches
//! (`Arc::make_mut`). The shard count doubles as the map grows, so a shard
//! stays around [`TARGET_SHARD_LEN`] entries: the cost of a change is
//! bounded, not proportional to the number of routes. Each operation hashes
//! its key once (and keeps the hash, so growth never rehashes): high bits
//! pick the shard, the shard's table uses the rest.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};

type Hasher = foldhash::fast::RandomState;

/// Entries per shard before the shard count doubles.
const TARGET_SHARD_LEN: usize = 512;
const MAX_SHARDS: usize = 4096;

#[derive(Clone)]
pub struct CowMap<K, V> {
    hasher: Hasher,
    shards: Vec<Arc<HashTable<Slot<K, V>>>>,
    len: usize,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        CowMap {
            hasher: Hasher::default(),
            shards: Vec::new(),
            len: 0,
        }
    }
}

impl<K, V> std::fmt::Debug for CowMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CowMap({} entries)", self.len)
    }
}

/// An entry with its key's hash: growing the map (more shards, larger
/// tables) moves entries without hashing their keys again.
type Slot<K, V> = (u64, K, V);

/// Whether a slot holds `key` (whose hash is `hash`): the stored hash is
/// compared first, the key only when it agrees.
fn holds<'q, K, V, Q>(hash: u64, key: &'q Q) -> impl Fn(&Slot<K, V>) -> bool + 'q
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    move |(h, k, _)| *h == hash && k.borrow() == key
}

/// Shard of a hash among `count` (a power of two). High bits: the tables
/// use the low bits for buckets and the top seven as tags.
fn shard_of(hash: u64, count: usize) -> usize {
    (hash >> 40) as usize & (count - 1)
}

/// The bucket a table of `buckets` (a power of two) starts its probe for
/// `hash` at: hashbrown takes the hash's low bits (`h1`). Should that change,
/// [`CowMap::get`]'s first guess misses and its search still finds the key.
fn probe_start(hash: u64, buckets: usize) -> usize {
    hash as usize & (buckets - 1)
}

impl<K: Hash + Eq + Clone, V: Clone> CowMap<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        let hash = self.hash(key);
        let shard = &self.shards[shard_of(hash, self.shards.len())];
        // The bucket the probe starts at holds about half of the keys (an
        // insert takes the first free bucket from there). Reading it
        // first, at an address computed from the hash alone, lets the CPU
        // fetch it while the control bytes are still on their way; the
        // table's own search must read those before it knows which bucket to
        // read (with many entries, two cache misses one after the other).
        // A wrong guess costs a compare, and the search follows as before.
        if let Some((_, _, value)) = shard
            .get_bucket(probe_start(hash, shard.num_buckets()))
            .filter(|slot| holds(hash, key)(slot))
        {
            return Some(value);
        }
        shard.find(hash, holds(hash, key)).map(|(_, _, v)| v)
    }

    /// The memory a lookup of `key` reads first, as address and length: the
    /// slot its probe starts at, when occupied (see [`CowMap::get`]), for a
    /// caller that has the CPU fetch it ahead of the lookup. Nothing is
    /// compared: the slot may hold another key. Reads the shard's header and
    /// one control byte.
    pub fn first_slot<Q>(&self, key: &Q) -> Option<(*const u8, usize)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        let hash = self.hash(key);
        let shard = &self.shards[shard_of(hash, self.shards.len())];
        let slot = shard.get_bucket(probe_start(hash, shard.num_buckets()))?;
        Some((std::ptr::from_ref(slot).cast(), std::mem::size_of_val(slot)))
    }

    /// The shard holding `key`, made unshared (copied if an older map
    /// shares it), and the key's hash; `None` when `key` is absent, in
    /// which case nothing is copied.
    fn shard_holding<Q>(&mut self, key: &Q) -> Option<(u64, &mut HashTable<Slot<K, V>>)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        let hash = self.hash(key);
        let count = self.shards.len();
        let shard = &mut self.shards[shard_of(hash, count)];
        shard.find(hash, holds(hash, key))?;
        Some((hash, Arc::make_mut(shard)))
    }

    /// Mutable access to the value under `key`, copying its shard if shared.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, table) = self.shard_holding(key)?;
        table.find_mut(hash, holds(hash, key)).map(|(_, _, v)| v)
    }

    /// The value under `key`, inserting `make()` first if absent.
    pub fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        self.grow_for(self.len + 1);
        let hash = self.hash(key);
        let count = self.shards.len();
        let table = Arc::make_mut(&mut self.shards[shard_of(hash, count)]);
        match table.entry(hash, holds(hash, key), |(h, _, _)| *h) {
            Entry::Occupied(entry) => &mut entry.into_mut().2,
            Entry::Vacant(entry) => {
                self.len += 1;
                &mut entry.insert((hash, key.clone(), make())).into_mut().2
            }
        }
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.grow_for(self.len + 1);
        let hash = self.hash(&key);
        let count = self.shards.len();
        let table = Arc::make_mut(&mut self.shards[shard_of(hash, count)]);
        match table.entry(hash, holds(hash, &key), |(h, _, _)| *h) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(&mut entry.get_mut().2, value)),
            Entry::Vacant(entry) => {
                entry.insert((hash, key, value));
                self.len += 1;
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, table) = self.shard_holding(key)?;
        let ((_, _, value), _) = table.find_entry(hash, holds(hash, key)).ok()?.remove();
        self.len -= 1;
        Some(value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|shard| shard.iter().map(|(_, k, v)| (k, v)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Make room for `len` entries: create the first shard, or double the
    /// shard count once shards would grow past their target size.
    fn grow_for(&mut self, len: usize) {
        if self.shards.is_empty() {
            self.shards.push(Arc::new(HashTable::new()));
        }
        let count = self.shards.len();
        if len <= count * TARGET_SHARD_LEN || count >= MAX_SHARDS {
            return;
        }
        let mut count = count * 2;
        while len > count * TARGET_SHARD_LEN && count < MAX_SHARDS {
            count *= 2;
        }
        let mut shards: Vec<HashTable<Slot<K, V>>> =
            (0..count).map(|_| HashTable::with_capacity(len / count + 1)).collect();
        let mut place = |slot: Slot<K, V>| {
            shards[shard_of(slot.0, count)].insert_unique(slot.0, slot, |(h, _, _)| *h);
        };
        for shard in std::mem::take(&mut self.shards) {
            // A shard no older map shares is moved, not copied (bulk builds).
            match Arc::try_unwrap(shard) {
                Ok(table) => table.into_iter().for_each(&mut place),
                Err(shared) => shared.iter().cloned().for_each(&mut place),
            }
        }
        self.shards = shards.into_iter().map(Arc::new).collect();
    }

    /// Make room for `additional` more entries at once (a bulk load), so
    /// the shards are not regrown step by step.
    pub fn reserve(&mut self, additional: usize) {
        self.grow_for(self.len + additional);
    }
}

impl<K: Hash + Eq + Clone, V: Clone> FromIterator<(K, V)> for CowMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = CowMap::default();
        for (key, value) in iter {
            map.insert(key, value);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::CowMap;

    #[test]
    fn clones_are_independent_and_growth_keeps_entries() {
        let mut map: CowMap<u32, u32> = (0..5000).map(|i| (i, i * 2)).collect();
        assert!(map.shards.len() >= 8);
        let snapshot = map.clone();
        map.insert(7, 0);
        map.remove(&8);
        assert_eq!(snapshot.get(&7), Some(&14));
        assert_eq!(snapshot.get(&8), Some(&16));
        assert_eq!(map.get(&7), Some(&0));
        assert_eq!(map.get(&8), None);
        assert_eq!(map.len(), 4999);
        assert_eq!(snapshot.len(), 5000);
        assert!((0..5000).filter(|i| *i != 8).all(|i| map.get(&i).is_some()));
        if let Some(v) = map.get_mut(&9) {
            *v = 1;
        }
        assert_eq!(snapshot.get(&9), Some(&18));
    }

    /// `get` reads the bucket the probe starts at before it searches; that
    /// only saves time while hashbrown puts many keys there (about half, at
    /// the load its tables run at).
    #[test]
    fn many_keys_sit_where_their_probe_starts() {
        let map: CowMap<u32, u32> = (0..50_000).map(|i| (i, i)).collect();
        let at_start = map
            .shards
            .iter()
            .flat_map(|shard| {
                (0..shard.num_buckets()).filter_map(move |index| {
                    let (hash, _, _) = shard.get_bucket(index)?;
                    Some(super::probe_start(*hash, shard.num_buckets()) == index)
                })
            })
            .filter(|at| *at)
            .count();
        assert!(
            at_start * 3 > map.len(),
            "{at_start} of {} keys at their probe start",
            map.len()
        );
        assert!((0..50_000).all(|i| map.get(&i) == Some(&i)));
        assert_eq!(map.get(&50_000), None);
    }

    #[test]
    fn reserve_sizes_the_shards_once_and_keeps_entries() {
        let mut map: CowMap<u32, u32> = (0..10).map(|i| (i, i)).collect();
        let shared = map.clone();
        map.reserve(100_000);
        assert!(map.shards.len() * super::TARGET_SHARD_LEN >= 100_010);
        assert!((0..10).all(|i| map.get(&i) == Some(&i)));
        assert_eq!(shared.get(&3), Some(&3), "a shared shard is copied, not moved");
        assert_eq!(map.len(), 10);
    }
}
