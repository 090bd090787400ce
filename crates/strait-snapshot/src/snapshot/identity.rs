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
    pub consumers_by_custom_id: CowMap<String, Uuid>,
    pub keyauth_by_key: CowMap<String, KeyauthKey>,
    pub basicauth_by_username: CowMap<String, Uuid>,
    pub jwt_by_key: CowMap<String, Uuid>,
    pub hmacauth_by_username: CowMap<String, Uuid>,
    pub oauth2_by_client_id: CowMap<String, Uuid>,
    /// Every consumer's prepared headers and ACL groups.
    pub consumer_views: CowMap<Uuid, Arc<ConsumerView>>,
    pub consumer_plugins: CowMap<Uuid, Arc<Vec<ConsumerPlugin>>>,
    /// Plugin names configured for some consumer: how many instances, and
    /// one of them (telling the chain which phases the plugin has).
    pub consumer_scoped: Arc<ConsumerScopedNames>,
    /// Consumer group -> its members.
    pub group_members: CowMap<Uuid, Arc<Vec<Uuid>>>,
    /// Consumer -> the consumer groups it belongs to.
    pub groups_of_consumer: CowMap<Uuid, Arc<Vec<Uuid>>>,
    /// Consumer group -> the enabled plugins scoped to it; each member's
    /// plugin list holds them too.
    pub group_plugins: CowMap<Uuid, Arc<Vec<Uuid>>>,
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
            if let Some(custom_id) = &consumer.custom_id {
                identities.consumers_by_custom_id.insert(custom_id.clone(), consumer.id);
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
        for c in state.oauth2_credentials.values() {
            identities.oauth2_by_client_id.insert(c.client_id.clone(), c.id);
        }
        let mut acls: Vec<_> = state.acls.values().collect();
        acls.sort_by_key(|a| (a.created_at, a.id));
        for acl in acls {
            identities.add_acl(state, acl.consumer.id, acl.id, &acl.group);
        }
        for membership in state.consumer_group_consumers.values() {
            identities.add_membership(state, instances, membership.consumer_group.id, membership.consumer.id);
        }
        for plugin in state.plugins.values() {
            identities.add_consumer_plugin(state, plugin, instances);
        }
        identities
    }

    /// Replace the view of consumer `id` (`consumer`: its row, None when
    /// it is not there, e.g. an ACL change listed before its consumer).
    fn set_view(&mut self, id: Uuid, consumer: Option<&Consumer>, groups: Vec<String>, acl_ids: Vec<Uuid>) {
        let consumer_groups = self
            .consumer_views
            .get(&id)
            .map(|v| v.consumer_groups.clone())
            .unwrap_or_default();
        let mut view = match consumer {
            Some(consumer) => ConsumerView::new(consumer, groups, acl_ids),
            None => ConsumerView {
                groups,
                acl_ids,
                ..ConsumerView::default()
            },
        };
        view.consumer_groups = consumer_groups;
        self.keep_view(id, view);
    }

    /// Store `view` when it carries groups (ACL or consumer groups); a
    /// consumer without any has none: the auth plugins then build its
    /// headers from the row (a few small copies per authenticated request)
    /// instead of the snapshot keeping them for every consumer (about 600
    /// bytes each: the largest part of a million consumers' memory).
    fn keep_view(&mut self, id: Uuid, view: ConsumerView) {
        match view.groups.is_empty() && view.consumer_groups.is_empty() {
            true => {
                self.consumer_views.remove(&id);
            }
            false => {
                self.consumer_views.insert(id, Arc::new(view));
            }
        }
    }

    /// The names of the consumer groups `consumer` belongs to, sorted.
    fn group_names(&self, state: &EntityState, consumer: Uuid) -> Vec<String> {
        let mut names: Vec<String> = self
            .groups_of_consumer
            .get(&consumer)
            .into_iter()
            .flat_map(|groups| groups.iter())
            .filter_map(|group| state.consumer_groups.get(group).map(|g| g.name.clone()))
            .collect();
        names.sort();
        names
    }

    /// Refresh the consumer group names in `consumer`'s view.
    fn set_view_groups(&mut self, state: &EntityState, consumer: Uuid) {
        let names = self.group_names(state, consumer);
        let mut view = self
            .consumer_views
            .get(&consumer)
            .map(|v| (**v).clone())
            .unwrap_or_else(|| match state.consumers.get(&consumer) {
                Some(row) => ConsumerView::new(row, Vec::new(), Vec::new()),
                None => ConsumerView::default(),
            });
        if view.consumer_groups == names {
            return;
        }
        view.consumer_groups = names;
        self.keep_view(consumer, view);
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
        self.set_view(consumer, state.consumers.get(&consumer).map(|c| &**c), groups, ids);
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

    /// The entry `plugin` puts in a consumer's list (`group`: the consumer
    /// group it is scoped to, by name).
    fn entry(plugin: &PluginEntity, instance: &Arc<dyn Plugin>, group: Option<&str>) -> ConsumerPlugin {
        let (route, service) = (plugin.route.is_some(), plugin.service.is_some());
        ConsumerPlugin {
            id: plugin.id,
            route: plugin.route.map(|r| r.id),
            service: plugin.service.map(|s| s.id),
            plugin: ScopedPlugin {
                instance: instance.clone(),
                protocols: ProtocolSet::from_names(plugin.protocols.iter().map(String::as_str)),
                rank: match group {
                    Some(_) => rank::of_group(route, service),
                    None => rank::of(route, service, true),
                },
            },
            group: group.map(Arc::from),
        }
    }

    /// Adds `entry` to `consumer`'s list, kept by rank (highest first),
    /// then group name; true when its plugin name is newly consumer-scoped
    /// (every route chain then needs a slot for it).
    fn add_entry(&mut self, consumer: Uuid, entry: ConsumerPlugin, name: &str) -> bool {
        let instance = entry.plugin.instance.clone();
        let mut list = self
            .consumer_plugins
            .get(&consumer)
            .map(|l| (**l).clone())
            .unwrap_or_default();
        list.push(entry);
        list.sort_by(|a, b| b.plugin.rank.cmp(&a.plugin.rank).then_with(|| a.group.cmp(&b.group)));
        self.consumer_plugins.insert(consumer, Arc::new(list));
        let names = Arc::make_mut(&mut self.consumer_scoped);
        let slot = names.entry(name.to_string()).or_insert((0, instance));
        slot.0 += 1;
        slot.0 == 1
    }

    /// Adds `plugin` to its consumer's list, or to every member's when it
    /// is scoped to a consumer group; true when its name is newly
    /// consumer-scoped.
    fn add_consumer_plugin(
        &mut self,
        state: &EntityState,
        plugin: &PluginEntity,
        instances: &CowMap<Uuid, Arc<dyn Plugin>>,
    ) -> bool {
        let Some(instance) = instances.get(&plugin.id) else {
            return false;
        };
        if let Some(consumer) = plugin.consumer {
            return self.add_entry(consumer.id, Self::entry(plugin, instance, None), &plugin.name);
        }
        let Some(group) = plugin.consumer_group else {
            return false;
        };
        let mut ids = self
            .group_plugins
            .get(&group.id)
            .map(|l| (**l).clone())
            .unwrap_or_default();
        ids.push(plugin.id);
        self.group_plugins.insert(group.id, Arc::new(ids));
        let name = state.consumer_groups.get(&group.id).map(|g| g.name.as_str());
        let members = self.group_members.get(&group.id).cloned().unwrap_or_default();
        let mut newly = false;
        for member in members.iter() {
            newly |= self.add_entry(*member, Self::entry(plugin, instance, name), &plugin.name);
        }
        newly
    }

    /// Removes plugin `id` from `consumer`'s list; true when its name is no
    /// longer consumer-scoped anywhere.
    fn remove_entry(&mut self, consumer: Uuid, id: Uuid, name: &str) -> bool {
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

    /// Removes `old` (a plugin as it was) from every list it is in.
    fn remove_consumer_plugin(&mut self, old: &PluginEntity) -> bool {
        if let Some(consumer) = old.consumer {
            return self.remove_entry(consumer.id, old.id, &old.name);
        }
        let Some(group) = old.consumer_group else {
            return false;
        };
        if let Some(current) = self.group_plugins.get(&group.id) {
            let ids: Vec<Uuid> = current.iter().copied().filter(|id| *id != old.id).collect();
            match ids.is_empty() {
                true => self.group_plugins.remove(&group.id),
                false => self.group_plugins.insert(group.id, Arc::new(ids)),
            };
        }
        let members = self.group_members.get(&group.id).cloned().unwrap_or_default();
        let mut gone = false;
        for member in members.iter() {
            gone |= self.remove_entry(*member, old.id, &old.name);
        }
        gone
    }

    /// `consumer` joined `group`: its view names the group, its list gets
    /// the group's plugins.
    fn add_membership(
        &mut self,
        state: &EntityState,
        instances: &CowMap<Uuid, Arc<dyn Plugin>>,
        group: Uuid,
        consumer: Uuid,
    ) -> bool {
        let push = |map: &mut CowMap<Uuid, Arc<Vec<Uuid>>>, key: Uuid, value: Uuid| {
            let mut list = map.get(&key).map(|l| (**l).clone()).unwrap_or_default();
            if !list.contains(&value) {
                list.push(value);
            }
            map.insert(key, Arc::new(list));
        };
        push(&mut self.group_members, group, consumer);
        push(&mut self.groups_of_consumer, consumer, group);
        self.set_view_groups(state, consumer);
        let name = state.consumer_groups.get(&group).map(|g| g.name.as_str());
        let plugins = self.group_plugins.get(&group).cloned().unwrap_or_default();
        let mut newly = false;
        for id in plugins.iter() {
            if let (Some(plugin), Some(instance)) = (state.plugins.get(id), instances.get(id)) {
                newly |= self.add_entry(consumer, Self::entry(plugin, instance, name), &plugin.name);
            }
        }
        newly
    }

    /// `consumer` left `group`.
    fn remove_membership(&mut self, state: &EntityState, group: Uuid, consumer: Uuid) -> bool {
        let pull = |map: &mut CowMap<Uuid, Arc<Vec<Uuid>>>, key: Uuid, value: Uuid| {
            let list: Vec<Uuid> = map
                .get(&key)
                .map(|l| l.iter().copied().filter(|v| *v != value).collect())
                .unwrap_or_default();
            match list.is_empty() {
                true => map.remove(&key),
                false => map.insert(key, Arc::new(list)),
            };
        };
        pull(&mut self.group_members, group, consumer);
        pull(&mut self.groups_of_consumer, consumer, group);
        if state.consumers.get(&consumer).is_some() || self.consumer_views.get(&consumer).is_some() {
            self.set_view_groups(state, consumer);
        }
        let plugins = self.group_plugins.get(&group).cloned().unwrap_or_default();
        let mut gone = false;
        for id in plugins.iter() {
            let name = state.plugins.get(id).map(|p| p.name.clone());
            if let Some(name) = name {
                gone |= self.remove_entry(consumer, *id, &name);
            }
        }
        gone
    }

    /// A consumer group was renamed: its members' views and the order of
    /// their group plugins follow the new name.
    fn note_group(&mut self, state: &EntityState, instances: &CowMap<Uuid, Arc<dyn Plugin>>, group: Uuid) -> bool {
        let members = self.group_members.get(&group).cloned().unwrap_or_default();
        let mut changed = false;
        for member in members.iter() {
            changed |= self.remove_membership(state, group, *member);
            changed |= self.add_membership(state, instances, group, *member);
        }
        changed
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
                let old = match previous {
                    Some(Entity::Consumer(c)) => c.custom_id.as_deref(),
                    _ => None,
                };
                let new = state
                    .consumers
                    .get(&id)
                    .and_then(|c| c.custom_id.as_deref().map(|u| (u, id)));
                swap_key(&mut self.consumers_by_custom_id, old, new);
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
            EntityKind::Oauth2Credentials => {
                let old = match previous {
                    Some(Entity::Oauth2Credential(c)) => Some(c.client_id.as_str()),
                    _ => None,
                };
                let new = state.oauth2_credentials.get(&id).map(|c| (c.client_id.as_str(), id));
                swap_key(&mut self.oauth2_by_client_id, old, new);
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
                    names_changed |= self.remove_consumer_plugin(old);
                }
                if let Some(plugin) = state.plugins.get(&id).filter(|p| p.enabled) {
                    names_changed |= self.add_consumer_plugin(state, plugin, instances);
                }
                return names_changed;
            }
            EntityKind::ConsumerGroupConsumers => {
                let mut names_changed = false;
                if let Some(Entity::ConsumerGroupConsumer(old)) = previous {
                    names_changed |= self.remove_membership(state, old.consumer_group.id, old.consumer.id);
                }
                if let Some(membership) = state.consumer_group_consumers.get(&id) {
                    let (group, consumer) = (membership.consumer_group.id, membership.consumer.id);
                    names_changed |= self.add_membership(state, instances, group, consumer);
                }
                return names_changed;
            }
            EntityKind::ConsumerGroups => return self.note_group(state, instances, id),
            _ => {}
        }
        false
    }
}
