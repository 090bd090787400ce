//! Who a request is: the snapshot's indexes from credential to consumer
//! (key-auth keys, basic-auth and hmac-auth usernames, jwt keys), consumer
//! usernames, ACL groups per consumer, and plugins scoped to each consumer.
//! Kept current change by change, so a new credential costs one insert, and
//! served to plugins through [`strait_plugins::Directory`] in O(1).

use std::collections::HashMap;
use std::sync::Arc;

use strait_core::{Consumer, Entity, EntityKind, Plugin as PluginEntity};
use strait_plugins::{rank, ConsumerPlugin, ConsumerView, KeyauthKey, Plugin, ProtocolSet, ScopedPlugin};
use strait_router::CowMap;
use uuid::Uuid;

use super::state::{EntityState, Previous};

/// Plugin name -> (instances configured for consumers, one of them).
pub(crate) type ConsumerScopedNames = HashMap<String, (usize, Arc<dyn Plugin>)>;

#[derive(Clone, Default)]
pub(crate) struct Identities {
    pub consumers_by_username: CowMap<String, Uuid>,
    pub keyauth_by_key: CowMap<String, KeyauthKey>,
    pub basicauth_by_username: CowMap<String, Uuid>,
    pub jwt_by_key: CowMap<String, Uuid>,
    pub hmacauth_by_username: CowMap<String, Uuid>,
    /// Every consumer's prepared headers and ACL groups.
    pub consumer_views: CowMap<Uuid, Arc<ConsumerView>>,
    pub consumer_plugins: CowMap<Uuid, Arc<Vec<ConsumerPlugin>>>,
    /// Plugin names configured for some consumer: how many instances, and
    /// one of them (telling the chain which phases the plugin has).
    pub consumer_scoped: Arc<ConsumerScopedNames>,
}

fn swap_key<V: Clone>(index: &mut CowMap<String, V>, old: Option<&str>, new: Option<(&str, V)>) {
    if let Some(old) = old {
        index.remove(old);
    }
    if let Some((key, id)) = new {
        index.insert(key.to_string(), id);
    }
}

impl Identities {
    /// Index every entity of `state` (a full compile).
    pub fn build(state: &EntityState, instances: &CowMap<Uuid, Arc<dyn Plugin>>) -> Identities {
        let mut identities = Identities::default();
        for consumer in state.consumers.values() {
            if let Some(username) = &consumer.username {
                identities.consumers_by_username.insert(username.clone(), consumer.id);
            }
            identities.set_view(consumer.id, Some(consumer), Vec::new(), Vec::new());
        }
        for c in state.keyauth_credentials.values() {
            identities.keyauth_by_key.insert(c.key.clone(), KeyauthKey::of(c));
        }
        for c in state.basicauth_credentials.values() {
            identities.basicauth_by_username.insert(c.username.clone(), c.id);
        }
        for c in state.jwt_secrets.values() {
            identities.jwt_by_key.insert(c.key.clone(), c.id);
        }
        for c in state.hmacauth_credentials.values() {
            identities.hmacauth_by_username.insert(c.username.clone(), c.id);
        }
        let mut acls: Vec<_> = state.acls.values().collect();
        acls.sort_by_key(|a| (a.created_at, a.id));
        for acl in acls {
            identities.add_acl(state, acl.consumer.id, acl.id, &acl.group);
        }
        for plugin in state.plugins.values() {
            identities.add_consumer_plugin(plugin, instances);
        }
        identities
    }

    /// Replace the view of consumer `id` (`consumer`: its row, None when
    /// it is not there, e.g. an ACL change listed before its consumer).
    fn set_view(&mut self, id: Uuid, consumer: Option<&Consumer>, groups: Vec<String>, acl_ids: Vec<Uuid>) {
        let view = match consumer {
            Some(consumer) => ConsumerView::new(consumer, groups, acl_ids),
            None => ConsumerView {
                groups,
                acl_ids,
                ..ConsumerView::default()
            },
        };
        self.consumer_views.insert(id, Arc::new(view));
    }

    /// The consumer row changed or went away: new headers, same groups.
    fn note_consumer(&mut self, state: &EntityState, id: Uuid) {
        match state.consumers.get(&id) {
            Some(consumer) => {
                let (groups, ids) = self.groups_of(id);
                self.set_view(id, Some(consumer), groups, ids);
            }
            None => {
                self.consumer_views.remove(&id);
            }
        }
    }

    fn groups_of(&self, consumer: Uuid) -> (Vec<String>, Vec<Uuid>) {
        self.consumer_views
            .get(&consumer)
            .map(|v| (v.groups.clone(), v.acl_ids.clone()))
            .unwrap_or_default()
    }

    fn add_acl(&mut self, state: &EntityState, consumer: Uuid, id: Uuid, group: &str) {
        let (mut groups, mut ids) = self.groups_of(consumer);
        ids.push(id);
        groups.push(group.to_string());
        self.set_view(consumer, state.consumers.get(&consumer), groups, ids);
    }

    fn remove_acl(&mut self, state: &EntityState, consumer: Uuid, id: Uuid) {
        if self.consumer_views.get(&consumer).is_none() {
            return;
        }
        let (mut groups, mut ids) = self.groups_of(consumer);
        if let Some(index) = ids.iter().position(|i| *i == id) {
            ids.remove(index);
            groups.remove(index);
        }
        match state.consumers.get(&consumer) {
            Some(row) => self.set_view(consumer, Some(row), groups, ids),
            None if ids.is_empty() => {
                self.consumer_views.remove(&consumer);
            }
            None => self.set_view(consumer, None, groups, ids),
        }
    }

    /// Adds `plugin` to its consumer's list; true when its name is newly
    /// consumer-scoped (every route chain then needs a slot for it).
    fn add_consumer_plugin(&mut self, plugin: &PluginEntity, instances: &CowMap<Uuid, Arc<dyn Plugin>>) -> bool {
        let (Some(consumer), Some(instance)) = (plugin.consumer, instances.get(&plugin.id)) else {
            return false;
        };
        let entry = ConsumerPlugin {
            id: plugin.id,
            route: plugin.route.map(|r| r.id),
            service: plugin.service.map(|s| s.id),
            plugin: ScopedPlugin {
                instance: instance.clone(),
                protocols: ProtocolSet::from_names(plugin.protocols.iter().map(String::as_str)),
                rank: rank::of(plugin.route.is_some(), plugin.service.is_some(), true),
            },
        };
        let mut list = self
            .consumer_plugins
            .get(&consumer.id)
            .map(|l| (**l).clone())
            .unwrap_or_default();
        list.push(entry);
        self.consumer_plugins.insert(consumer.id, Arc::new(list));
        let names = Arc::make_mut(&mut self.consumer_scoped);
        let slot = names.entry(plugin.name.clone()).or_insert((0, instance.clone()));
        slot.0 += 1;
        slot.0 == 1
    }

    /// Removes plugin `id` of `consumer`; true when its name is no longer
    /// consumer-scoped anywhere.
    fn remove_consumer_plugin(&mut self, consumer: Uuid, id: Uuid, name: &str) -> bool {
        let Some(current) = self.consumer_plugins.get(&consumer) else {
            return false;
        };
        let mut list = (**current).clone();
        let before = list.len();
        list.retain(|p| p.id != id);
        if list.len() == before {
            return false;
        }
        if list.is_empty() {
            self.consumer_plugins.remove(&consumer);
        } else {
            self.consumer_plugins.insert(consumer, Arc::new(list));
        }
        let names = Arc::make_mut(&mut self.consumer_scoped);
        match names.get_mut(name) {
            Some(slot) if slot.0 > 1 => {
                slot.0 -= 1;
                false
            }
            Some(_) => {
                names.remove(name);
                true
            }
            None => false,
        }
    }

    /// Keep the indexes current after one change (already applied to
    /// `state`). Returns true when every route chain must be rebuilt.
    pub fn note(
        &mut self,
        state: &EntityState,
        instances: &CowMap<Uuid, Arc<dyn Plugin>>,
        kind: EntityKind,
        id: Uuid,
        previous: &Previous,
    ) -> bool {
        match kind {
            EntityKind::Consumers => {
                let old = match previous {
                    Some(Entity::Consumer(c)) => c.username.as_deref(),
                    _ => None,
                };
                let new = state
                    .consumers
                    .get(&id)
                    .and_then(|c| c.username.as_deref().map(|u| (u, id)));
                swap_key(&mut self.consumers_by_username, old, new);
                self.note_consumer(state, id);
            }
            EntityKind::KeyauthCredentials => {
                let old = match previous {
                    Some(Entity::KeyauthCredential(c)) => Some(c.key.as_str()),
                    _ => None,
                };
                let new = state
                    .keyauth_credentials
                    .get(&id)
                    .map(|c| (c.key.as_str(), KeyauthKey::of(c)));
                swap_key(&mut self.keyauth_by_key, old, new);
            }
            EntityKind::BasicauthCredentials => {
                let old = match previous {
                    Some(Entity::BasicauthCredential(c)) => Some(c.username.as_str()),
                    _ => None,
                };
                let new = state.basicauth_credentials.get(&id).map(|c| (c.username.as_str(), id));
                swap_key(&mut self.basicauth_by_username, old, new);
            }
            EntityKind::JwtSecrets => {
                let old = match previous {
                    Some(Entity::JwtSecret(c)) => Some(c.key.as_str()),
                    _ => None,
                };
                let new = state.jwt_secrets.get(&id).map(|c| (c.key.as_str(), id));
                swap_key(&mut self.jwt_by_key, old, new);
            }
            EntityKind::HmacauthCredentials => {
                let old = match previous {
                    Some(Entity::HmacauthCredential(c)) => Some(c.username.as_str()),
                    _ => None,
                };
                let new = state.hmacauth_credentials.get(&id).map(|c| (c.username.as_str(), id));
                swap_key(&mut self.hmacauth_by_username, old, new);
            }
            EntityKind::Acls => {
                if let Some(Entity::Acl(old)) = previous {
                    self.remove_acl(state, old.consumer.id, old.id);
                }
                if let Some(acl) = state.acls.get(&id) {
                    self.add_acl(state, acl.consumer.id, acl.id, &acl.group);
                }
            }
            EntityKind::Plugins => {
                let mut names_changed = false;
                if let Some(Entity::Plugin(old)) = previous {
                    if let Some(consumer) = old.consumer {
                        names_changed |= self.remove_consumer_plugin(consumer.id, old.id, &old.name);
                    }
                }
                if let Some(plugin) = state.plugins.get(&id).filter(|p| p.enabled) {
                    names_changed |= self.add_consumer_plugin(plugin, instances);
                }
                return names_changed;
            }
            _ => {}
        }
        false
    }
}
