//! kafka-upstream on a gRPC call: the ingestion pattern. Every message of
//! the client's stream (any method, unary or client/bidi streaming) is
//! published as it arrives, its protobuf bytes as the Kafka message value,
//! and acknowledged back on the response stream as soon as Kafka
//! acknowledged it, with this message (field numbers are the contract):
//!
//! ```proto
//! message KafkaAck {
//!   uint64 sequence  = 1; // the request message's index in the call, from 0
//!   int32  partition = 2;
//!   int64  offset    = 3; // -1 with producer_request_acks = 0
//! }
//! ```
//!
//! Acknowledgements come in the order Kafka gives them, which may differ
//! from the order sent (partitions are taken in turn). The call ends with
//! `grpc-status: 0` once the client half-closed and every message was
//! acknowledged; at the first message Kafka did not take, with
//! `UNAVAILABLE` (14) and `could not send message to topic`: messages
//! acknowledged before it are in the topic, the others must be sent again.
//! A compressed message is `UNIMPLEMENTED` (12), one larger than
//! `producer_request_limits_bytes_per_request` `RESOURCE_EXHAUSTED` (8).
//!
//! At most [`UNACKED`] messages of a call wait for Kafka at once; past that
//! the request body is not read, so HTTP/2 flow control holds the client.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;
use strait_runtime::kafka::{Delivered, KafkaError, Producer};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::grpc::{frame, Unframer};
use crate::{ServeFuture, StreamBody};

/// Messages of one call waiting for Kafka at most.
pub(super) const UNACKED: usize = 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body: frames the pump sends, in order.
struct Channel(mpsc::Receiver<Frame<Bytes>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

fn varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// A `KafkaAck` message, protobuf-encoded (fields 1, 2, 3 as varints; a
/// negative int32/int64 is its two's complement, as protobuf says).
pub(super) fn ack(sequence: u64, delivered: Delivered) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    out.put_u8(0x08);
    varint(&mut out, sequence);
    out.put_u8(0x10);
    varint(&mut out, delivered.partition as i64 as u64);
    out.put_u8(0x18);
    varint(&mut out, delivered.offset as u64);
    out.freeze()
}

fn trailers(status: u32, message: &str) -> Frame<Bytes> {
    let mut map = http::HeaderMap::new();
    map.insert("grpc-status", http::HeaderValue::from(status));
    if !message.is_empty() {
        if let Ok(value) = http::HeaderValue::from_str(message) {
            map.insert("grpc-message", value);
        }
    }
    Frame::trailers(map)
}

/// Serves one gRPC call: the response head at once, then acks as they come.
pub(super) fn serve(producer: Producer, topic: Arc<str>, max_message: usize, request: http::Request<StreamBody>) -> ServeFuture {
    Box::pin(async move {
        let (sender, receiver) = mpsc::channel(64);
        tokio::spawn(pump(producer, topic, max_message, request.into_body(), sender));
        let mut response = http::Response::new(StreamBody::new(Channel(receiver)));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        response
    })
}

async fn pump(
    producer: Producer,
    topic: Arc<str>,
    max_message: usize,
    mut body: StreamBody,
    out: mpsc::Sender<Frame<Bytes>>,
) {
    let mut unframer = Unframer::default();
    let mut waiting: JoinSet<(u64, Result<Delivered, KafkaError>)> = JoinSet::new();
    let mut sequence = 0u64;
    let mut ended = false;
    let (status, message) = loop {
        if ended && waiting.is_empty() {
            break match unframer.pending() {
                0 => (0, String::new()),
                _ => (13, "the request ended inside a message".to_string()),
            };
        }
        tokio::select! {
            piece = body.frame(), if !ended && waiting.len() < UNACKED => match piece {
                None => ended = true,
                Some(Err(error)) => {
                    tracing::debug!(%error, "kafka-upstream: the gRPC request body failed");
                    break (1, "the request was cancelled".to_string());
                }
                Some(Ok(piece)) => {
                    let Ok(data) = piece.into_data() else { continue };
                    unframer.push(&data);
                    let mut refused = None;
                    while let Some((flags, payload)) = unframer.next_frame() {
                        if flags & 1 != 0 {
                            refused = Some((12, "compressed messages are not supported".to_string()));
                            break;
                        }
                        if payload.len() > max_message {
                            refused = Some((8, format!("a message is larger than {max_message} bytes")));
                            break;
                        }
                        let (producer, topic, seq) = (producer.clone(), topic.clone(), sequence);
                        waiting.spawn(async move { (seq, producer.send(&topic, None, payload).await) });
                        sequence += 1;
                    }
                    if refused.is_none() && unframer.pending() > max_message + 5 {
                        refused = Some((8, format!("a message is larger than {max_message} bytes")));
                    }
                    if let Some(refused) = refused {
                        break refused;
                    }
                }
            },
            Some(done) = waiting.join_next(), if !waiting.is_empty() => match done {
                Ok((seq, Ok(delivered))) => {
                    if out.send(Frame::data(frame(0, &ack(seq, delivered)))).await.is_err() {
                        return; // the client is gone
                    }
                }
                Ok((seq, Err(error))) => {
                    tracing::error!(%error, %topic, sequence = seq, "kafka-upstream: could not send message to topic");
                    break (14, "could not send message to topic".to_string());
                }
                Err(_) => break (13, "internal error".to_string()),
            },
        }
    };
    let _ = out.send(trailers(status, &message)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_protobuf() {
        let bytes = ack(300, Delivered { partition: 2, offset: 7 });
        assert_eq!(&bytes[..], &[0x08, 0xac, 0x02, 0x10, 0x02, 0x18, 0x07]);
        let none = ack(0, Delivered { partition: 0, offset: -1 });
        assert_eq!(none.len(), 1 + 1 + 1 + 1 + 1 + 10, "a negative int64 takes ten bytes");
    }
}
