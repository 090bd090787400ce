"""Reads every message of a topic from the beginning with kafka-python (PyPI), a client that
is not Strait's, and prints them as JSON: [{"partition", "offset", "value", "base64"}].

Usage: consume.py BOOTSTRAP TOPIC
"""

import base64
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = consumer.partitions_for_topic(topic) or set()
    assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
    out = []
    if assigned:
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        end = consumer.end_offsets(assigned)
        deadline = time.monotonic() + 120
        # Positions are known only once a poll has reset them: poll first.
        while time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    if record.offset < end[tp]:
                        out.append({"partition": tp.partition, "offset": record.offset,
                                    "value": record.value.decode("utf-8", "replace"),
                                    "base64": base64.b64encode(record.value).decode()})
            if all(consumer.position(tp, timeout_ms=5000) >= end[tp] for tp in assigned):
                break
        else:
            sys.exit("the topic was not read to its end within 120 s")
    consumer.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
