//! A hash map that is cheap to clone and cheap to change after cloning.
//!
//! Routers are shared immutably by snapshots and each configuration change
//! derives a new router from the previous one. `CowMap` splits its entries
//! into shards, each behind an `Arc`: cloning the map copies one pointer per
//! shard, and changing a clone copies only the shard it touches
//! (`Arc::make_mut`). The shard count doubles as the map grows, so a shard
//! stays around [`TARGET_SHARD_LEN`] entries: the cost of a change is
//! bounded, not proportional to the number of routes.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

type Hasher = foldhash::fast::RandomState;

/// Entries per shard before the shard count doubles.
const TARGET_SHARD_LEN: usize = 512;
const MAX_SHARDS: usize = 4096;

#[derive(Clone)]
pub struct CowMap<K, V> {
    hasher: Hasher,
    shards: Vec<Arc<HashMap<K, V, Hasher>>>,
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

impl<K: Hash + Eq + Clone, V: Clone> CowMap<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        if self.shards.len() <= 1 {
            return 0;
        }
        let hash = self.hasher.hash_one(key);
        // High bits: the inner maps use the low ones.
        (hash >> 40) as usize & (self.shards.len() - 1)
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        self.shards[self.shard_of(key)].get(key)
    }

    /// Mutable access to the value under `key`, copying its shard if shared.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        let shard = self.shard_of(key);
        let map = &mut self.shards[shard];
        if !map.contains_key(key) {
            return None;
        }
        Arc::make_mut(map).get_mut(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if self.shards.is_empty() {
            self.shards.push(Arc::new(HashMap::with_hasher(self.hasher.clone())));
        }
        let shard = self.shard_of(&key);
        let previous = Arc::make_mut(&mut self.shards[shard]).insert(key, value);
        if previous.is_none() {
            self.len += 1;
            self.grow_if_needed();
        }
        previous
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.len == 0 {
            return None;
        }
        let shard = self.shard_of(key);
        if !self.shards[shard].contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(&mut self.shards[shard]).remove(key);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Double the shard count once shards grow past their target size.
    fn grow_if_needed(&mut self) {
        let count = self.shards.len();
        if self.len <= count * TARGET_SHARD_LEN || count >= MAX_SHARDS {
            return;
        }
        let entries: Vec<(K, V)> = self.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let per_shard = self.len / (count * 2) + 1;
        self.shards = (0..count * 2)
            .map(|_| Arc::new(HashMap::with_capacity_and_hasher(per_shard, self.hasher.clone())))
            .collect();
        for (key, value) in entries {
            let shard = self.shard_of(&key);
            Arc::make_mut(&mut self.shards[shard]).insert(key, value);
        }
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
}
