//! The producer task: takes queued messages, learns where each topic's
//! partitions lead (`Metadata`), sends each leader one `Produce` request
//! per topic at a time (up to [`IN_FLIGHT`] per broker), and answers every
//! message from the broker's verdict for its partition.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::conn::Link;
use super::wire::{self, Metadata};
use super::{Delivered, KafkaError, Message, ProducerConfig};

/// Produce requests in flight to one broker at most (Kafka's own producer
/// default for `max.in.flight.requests.per.connection`).
const IN_FLIGHT: usize = 5;

struct Topic {
    /// `(partition, leader)` for the partitions that have a leader now.
    partitions: Vec<(i32, i32)>,
    next: usize,
}

struct Sent {
    broker: i32,
    topic: Arc<str>,
    partition: i32,
    messages: Vec<Message>,
    answer: Result<Bytes, String>,
}

struct State {
    config: Arc<ProducerConfig>,
    topics: HashMap<Arc<str>, Topic>,
    brokers: HashMap<i32, (String, u16)>,
    links: HashMap<(String, u16), Link>,
    busy: HashMap<i32, usize>,
    pending: VecDeque<Message>,
    waiting: Vec<(Instant, Message)>,
}

pub(super) async fn run(config: Arc<ProducerConfig>, mut queue: mpsc::Receiver<Message>) {
    let mut state = State {
        config: config.clone(),
        topics: HashMap::new(),
        brokers: HashMap::new(),
        links: HashMap::new(),
        busy: HashMap::new(),
        pending: VecDeque::new(),
        waiting: Vec::new(),
    };
    let mut in_flight: JoinSet<Sent> = JoinSet::new();
    let hold = config.messages_per_request.max(1) * 2;
    let mut open = true;
    loop {
        state.dispatch(&mut in_flight).await;
        if !open && state.pending.is_empty() && state.waiting.is_empty() && in_flight.is_empty() {
            return;
        }
        let retry_at = state.waiting.iter().map(|(at, _)| *at).min();
        tokio::select! {
            message = queue.recv(), if open && state.pending.len() < hold => match message {
                Some(message) => {
                    state.pending.push_back(message);
                    while state.pending.len() < hold {
                        let Ok(message) = queue.try_recv() else { break };
                        state.pending.push_back(message);
                    }
                }
                None => open = false,
            },
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                if let Ok(sent) = done {
                    state.settle(sent);
                }
            }
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                let now = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) = state.waiting.drain(..).partition(|(at, _)| *at <= now);
                state.waiting = later;
                state.pending.extend(due.into_iter().map(|(_, m)| m));
            }
        }
    }
}

fn answer(message: Message, result: Result<Delivered, KafkaError>) {
    if let Some(reply) = message.reply {
        let _ = reply.send(result);
    } else if let Err(error) = result {
        // A log entry: no caller to tell; counted with the log queues'.
        crate::logs::queue::count_dropped(1, || format!("Kafka topic {}: {error}, entry dropped", message.topic));
    }
}

impl State {
    fn link(&mut self, host: &str, port: u16) -> Link {
        let key = (host.to_string(), port);
        if let Some(link) = self.links.get(&key).filter(|l| !l.is_closed()) {
            return link.clone();
        }
        let link = Link::open(self.config.cluster.clone(), host.to_string(), port);
        self.links.insert(key, link.clone());
        link
    }

    /// Asks the known brokers, then the bootstrap ones, for `topics`.
    async fn refresh(&mut self, topics: &[&str]) -> Result<Metadata, String> {
        let mut candidates: Vec<(String, u16)> = self.brokers.values().cloned().collect();
        for server in &self.config.cluster.bootstrap {
            if !candidates.contains(server) {
                candidates.push(server.clone());
            }
        }
        let mut last = "no bootstrap server".to_string();
        for (host, port) in candidates {
            let link = self.link(&host, port);
            let body = wire::metadata_body(topics);
            match link.call(wire::METADATA, wire::METADATA_VERSION, body, true).await {
                Ok(answer) => match wire::parse_metadata(&answer) {
                    Ok(metadata) => return Ok(metadata),
                    Err(error) => last = error.to_string(),
                },
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// A message that failed with a retriable error: again after the
    /// backoff, or failed for good.
    fn retry(&mut self, mut message: Message, error: KafkaError) {
        if message.reply.as_ref().is_some_and(|r| r.is_closed()) {
            return; // its caller stopped waiting
        }
        if message.retries >= self.config.max_attempts {
            answer(message, Err(error));
            return;
        }
        message.retries += 1;
        self.waiting.push((Instant::now() + self.config.backoff, message));
    }

    async fn dispatch(&mut self, in_flight: &mut JoinSet<Sent>) {
        if self.pending.is_empty() {
            return;
        }
        // Metadata for the topics that have none yet.
        let mut unknown: Vec<Arc<str>> = Vec::new();
        for message in &self.pending {
            if !self.topics.contains_key(&message.topic) && !unknown.contains(&message.topic) {
                unknown.push(message.topic.clone());
            }
        }
        if !unknown.is_empty() {
            let names: Vec<&str> = unknown.iter().map(|t| &**t).collect();
            match self.refresh(&names).await {
                Ok(metadata) => {
                    self.learn(metadata, &unknown);
                    // Topics the answer left out: tried again later.
                    let messages: Vec<Message> = self.pending.drain(..).collect();
                    for message in messages {
                        if self.topics.contains_key(&message.topic) || !unknown.contains(&message.topic) {
                            self.pending.push_back(message);
                        } else {
                            let error = format!("the brokers did not describe topic {}", message.topic);
                            self.retry(message, KafkaError::Unavailable(error));
                        }
                    }
                }
                Err(error) => {
                    let messages: Vec<Message> = self.pending.drain(..).collect();
                    for message in messages {
                        if unknown.contains(&message.topic) {
                            self.retry(message, KafkaError::Unavailable(error.clone()));
                        } else {
                            self.pending.push_back(message);
                        }
                    }
                }
            }
        }
        // One request per topic while its leader has room.
        let mut kept = VecDeque::new();
        while let Some(first) = self.pending.pop_front() {
            let topic = first.topic.clone();
            let Some(state) = self.topics.get_mut(&topic) else {
                kept.push_back(first);
                continue;
            };
            if state.partitions.is_empty() {
                self.topics.remove(&topic);
                self.retry(
                    first,
                    KafkaError::Unavailable(format!("topic {topic} has no partition with a leader")),
                );
                continue;
            }
            let (partition, leader) = state.partitions[state.next % state.partitions.len()];
            if self.busy.get(&leader).copied().unwrap_or(0) >= IN_FLIGHT {
                kept.push_back(first);
                continue;
            }
            state.next = state.next.wrapping_add(1);
            let Some((host, port)) = self.brokers.get(&leader).cloned() else {
                self.topics.remove(&topic);
                self.retry(
                    first,
                    KafkaError::Unavailable(format!("no address for broker {leader}")),
                );
                continue;
            };
            // This topic's other messages, up to the request's limits.
            let mut batch = vec![first];
            let mut bytes = batch[0].record.value.len();
            let mut rest = VecDeque::new();
            while let Some(message) = self.pending.pop_front() {
                let fits = batch.len() < self.config.messages_per_request
                    && bytes + message.record.value.len() <= self.config.bytes_per_request;
                if message.topic == topic && fits {
                    bytes += message.record.value.len();
                    batch.push(message);
                } else {
                    rest.push_back(message);
                }
            }
            self.pending = rest;
            batch.retain(|m| !m.reply.as_ref().is_some_and(|r| r.is_closed()));
            if batch.is_empty() {
                continue;
            }
            let records: Vec<&wire::Record> = batch.iter().map(|m| &m.record).collect();
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let records = wire::record_batch(&records, now_ms);
            let body = wire::produce_body(
                self.config.acks,
                self.config.request_timeout.as_millis().min(i32::MAX as u128) as i32,
                &topic,
                &[(partition, records)],
            );
            let link = self.link(&host, port);
            *self.busy.entry(leader).or_insert(0) += 1;
            let expects_answer = self.config.acks != 0;
            in_flight.spawn(async move {
                let answer = link
                    .call(wire::PRODUCE, wire::PRODUCE_VERSION, body, expects_answer)
                    .await;
                Sent {
                    broker: leader,
                    topic,
                    partition,
                    messages: batch,
                    answer,
                }
            });
        }
        self.pending = kept;
    }

    fn learn(&mut self, metadata: Metadata, asked: &[Arc<str>]) {
        for broker in metadata.brokers {
            self.brokers.insert(broker.node_id, (broker.host, broker.port));
        }
        for topic in metadata.topics {
            let Some(name) = asked.iter().find(|t| ***t == *topic.name) else {
                continue;
            };
            if topic.error != 0 {
                // Auto-creation in progress, or not allowed: asked again
                // on the next attempt.
                tracing::debug!(topic = %topic.name, error = wire::error_name(topic.error), "Kafka topic not ready");
                let fatal = !wire::retriable(topic.error);
                let messages: Vec<Message> = self.pending.drain(..).collect();
                for message in messages {
                    if message.topic != *name {
                        self.pending.push_back(message);
                    } else if fatal {
                        answer(
                            message,
                            Err(KafkaError::Refused(format!(
                                "topic {}: {}",
                                topic.name,
                                wire::error_name(topic.error)
                            ))),
                        );
                    } else {
                        let error =
                            KafkaError::Unavailable(format!("topic {}: {}", topic.name, wire::error_name(topic.error)));
                        self.retry(message, error);
                    }
                }
                continue;
            }
            let partitions = topic
                .partitions
                .iter()
                .filter(|p| p.leader >= 0)
                .map(|p| (p.id, p.leader))
                .collect();
            let start = crate::random::next_u64() as usize;
            self.topics.insert(
                name.clone(),
                Topic {
                    partitions,
                    next: start,
                },
            );
        }
    }

    fn settle(&mut self, sent: Sent) {
        if let Some(busy) = self.busy.get_mut(&sent.broker) {
            *busy = busy.saturating_sub(1);
        }
        let verdict = match sent.answer {
            Err(error) => Err((true, error)),
            Ok(answer) if self.config.acks == 0 => {
                let _ = answer;
                Ok(-1)
            }
            Ok(answer) => match wire::parse_produce(&answer) {
                Err(error) => Err((false, error.to_string())),
                Ok(results) => match results
                    .iter()
                    .find(|(t, p, _, _)| **t == *sent.topic && *p == sent.partition)
                {
                    None => Err((false, "the broker did not answer for the partition".to_string())),
                    Some((_, _, 0, base)) => Ok(*base),
                    Some((_, _, code, _)) => Err((wire::retriable(*code), wire::error_name(*code).to_string())),
                },
            },
        };
        match verdict {
            Ok(base) => {
                for (i, message) in sent.messages.into_iter().enumerate() {
                    let offset = if base < 0 { -1 } else { base + i as i64 };
                    answer(
                        message,
                        Ok(Delivered {
                            partition: sent.partition,
                            offset,
                        }),
                    );
                }
            }
            Err((retriable, error)) => {
                // The leader may have moved: ask again before the retry.
                self.topics.remove(&sent.topic);
                let error = format!("topic {} partition {}: {error}", sent.topic, sent.partition);
                for message in sent.messages {
                    if retriable {
                        self.retry(message, KafkaError::Unavailable(error.clone()));
                    } else {
                        answer(message, Err(KafkaError::Refused(error.clone())));
                    }
                }
            }
        }
    }
}
