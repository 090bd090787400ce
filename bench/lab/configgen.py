"""Kong-format declarative configurations for load tests, and the targets file the
wrk random-route script reads.

The published Kong LMDB test set (`--preset lmdb`): 10,000 routes, 10,000 consumers each
with one key-auth credential, and key-auth plus request-termination on every route: about
50,000 objects. `--without-key-auth` keeps everything but the key-auth plugins (for
gateways that do not implement key-auth yet).

    python -m lab.configgen --preset lmdb -o lmdb.json            # from bench/
    python -m lab.configgen --routes 50000 --service-url http://127.0.0.1:9000 -o many.json

Every entity gets a deterministic id (uuid5 of its name), so two files generated with the
same options are byte-identical, and posting one twice keeps ids stable.
"""

from __future__ import annotations

import argparse
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

NAMESPACE = uuid.UUID("6f1d1a2e-52a6-4c5e-9d3b-1f7a0c2b8e41")
ACL_GROUP = "members"
PRESETS = {
    "lmdb": {"routes": 10_000, "consumers": 10_000, "key_auth": True, "request_termination": True},
}


@dataclass
class ConfigSpec:
    """What to generate."""

    routes: int
    consumers: int = 0
    key_auth: bool = False
    acl: bool = False                   # acl (allow ACL_GROUP) on every route, the group on every consumer
    request_transformer: bool = False   # request-transformer adding a header and a query argument
    rate_limiting: bool = False         # rate-limiting (local, by consumer) with limits never reached
    prometheus: bool = False            # prometheus with status-code, latency and bandwidth metrics
    request_termination: bool = False
    service_url: str | None = None      # one service every route proxies to
    message: str = "ok"                 # request-termination message (changes the config hash)
    key_header: str = "apikey"
    # Further plugins on every route, as {"name": ..., "config": {...}} (pre-function,
    # a custom Lua plugin, ...).
    extra_plugins: list = field(default_factory=list)


@dataclass
class GeneratedConfig:
    """A written configuration and what it holds."""

    path: Path
    targets: Path
    bytes: int
    objects: dict = field(default_factory=dict)

    @property
    def total_objects(self) -> int:
        return sum(self.objects.values())

    def describe(self) -> dict:
        return {"path": str(self.path), "bytes": self.bytes, "objects": self.objects,
                "total_objects": self.total_objects}


def entity_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{kind}:{name}"))


def route_path(index: int) -> str:
    """Fixed-width paths: no route's path is a prefix of another's."""
    return f"/r{index:06d}"


def consumer_key(index: int) -> str:
    return uuid.uuid5(NAMESPACE, f"key:{index}").hex


def _route_plugins(spec: ConfigSpec, route_name: str) -> list[dict]:
    plugins = []
    if spec.key_auth:
        plugins.append({"id": entity_id("plugin", f"{route_name}:key-auth"), "name": "key-auth",
                        "config": {"key_names": [spec.key_header], "hide_credentials": False}})
    if spec.acl:
        plugins.append({"id": entity_id("plugin", f"{route_name}:acl"), "name": "acl",
                        "config": {"allow": [ACL_GROUP]}})
    if spec.request_transformer:
        plugins.append({"id": entity_id("plugin", f"{route_name}:request-transformer"),
                        "name": "request-transformer",
                        "config": {"add": {"headers": ["x-gateway:strait"], "querystring": ["via:gateway"]},
                                   "remove": {"headers": ["x-internal"]}}})
    if spec.rate_limiting:
        plugins.append({"id": entity_id("plugin", f"{route_name}:rate-limiting"), "name": "rate-limiting",
                        "config": {"second": 1_000_000_000, "hour": 1_000_000_000_000, "policy": "local"}})
    if spec.prometheus:
        plugins.append({"id": entity_id("plugin", f"{route_name}:prometheus"), "name": "prometheus",
                        "config": {"status_code_metrics": True, "latency_metrics": True,
                                   "bandwidth_metrics": True}})
    if spec.request_termination:
        plugins.append({"id": entity_id("plugin", f"{route_name}:request-termination"),
                        "name": "request-termination",
                        "config": {"status_code": 200, "message": spec.message}})
    for extra in spec.extra_plugins:
        plugins.append({"id": entity_id("plugin", f"{route_name}:{extra['name']}"), **extra})
    return plugins


def _routes(spec: ConfigSpec) -> list[dict]:
    routes = []
    for index in range(1, spec.routes + 1):
        name = f"route-{index:06d}"
        route = {"id": entity_id("route", name), "name": name, "paths": [route_path(index)]}
        plugins = _route_plugins(spec, name)
        if plugins:
            route["plugins"] = plugins
        routes.append(route)
    return routes


def _consumers(spec: ConfigSpec) -> list[dict]:
    consumers = []
    for index in range(1, spec.consumers + 1):
        name = f"consumer-{index:06d}"
        consumer = {
            "id": entity_id("consumer", name), "username": name,
            "keyauth_credentials": [{"id": entity_id("keyauth", name), "key": consumer_key(index)}],
        }
        if spec.acl:
            consumer["acls"] = [{"id": entity_id("acl", name), "group": ACL_GROUP}]
        consumers.append(consumer)
    return consumers


def build_document(spec: ConfigSpec) -> dict:
    """The declarative document (a dict ready for json.dump)."""
    document: dict = {"_format_version": "3.0", "_comment": "generated by bench/lab/configgen.py"}
    routes = _routes(spec)
    if spec.service_url:
        document["services"] = [{"id": entity_id("service", "origin"), "name": "origin",
                                 "url": spec.service_url, "routes": routes}]
    else:
        document["routes"] = routes
    if spec.consumers:
        document["consumers"] = _consumers(spec)
    return document


def count_objects(spec: ConfigSpec) -> dict:
    plugins_per_route = (int(spec.key_auth) + int(spec.acl) + int(spec.request_transformer)
                         + int(spec.rate_limiting) + int(spec.prometheus) + int(spec.request_termination)
                         + len(spec.extra_plugins))
    counts = {"services": 1 if spec.service_url else 0, "routes": spec.routes,
              "plugins": spec.routes * plugins_per_route, "consumers": spec.consumers,
              "keyauth_credentials": spec.consumers, "acls": spec.consumers if spec.acl else 0}
    return {kind: count for kind, count in counts.items() if count}


def write_targets(spec: ConfigSpec, path: Path) -> None:
    """One `path<TAB>key` line per route (key empty past the last consumer)."""
    with open(path, "w") as out:
        for index in range(1, max(spec.routes, spec.consumers) + 1):
            route = route_path(index) if index <= spec.routes else ""
            key = consumer_key(index) if index <= spec.consumers else ""
            out.write(f"{route}\t{key}\n")


def write_cycled_targets(routes: int, lines: int, path: Path) -> Path:
    """`lines` path lines cycling through routes 1..`routes` (`lines` a multiple of
    `routes`: each route equally often). Loads that compare route counts give every
    node a file this long, so the load generator does the same work per request for
    each (wrk's random pick among 50,000 formatted requests costs more than among one)."""
    if lines % routes:
        raise ValueError(f"{lines} lines do not cycle evenly through {routes} routes")
    with open(path, "w") as out:
        for index in range(lines):
            out.write(f"{route_path(index % routes + 1)}\t\n")
    return path


def write_config(spec: ConfigSpec, path: Path) -> GeneratedConfig:
    """Write the JSON document and its `.targets` file next to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(build_document(spec), separators=(",", ":"))
    path.write_text(text)
    targets = path.with_suffix(".targets")
    write_targets(spec, targets)
    return GeneratedConfig(path, targets, len(text.encode()), count_objects(spec))


def spec_from_args(args: argparse.Namespace) -> ConfigSpec:
    values = dict(PRESETS[args.preset]) if args.preset else {}
    for key in ("routes", "consumers", "service_url", "message"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    for plugin in args.plugins or []:
        values[plugin.replace("-", "_")] = True
    if args.without_key_auth:
        values["key_auth"] = False
    values.setdefault("routes", 1)
    return ConfigSpec(**values)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--routes", type=int)
    parser.add_argument("--consumers", type=int, help="consumers, each with one key-auth credential")
    parser.add_argument("--plugins", nargs="*", choices=["key-auth", "acl", "request-transformer", "request-termination"],
                        help="plugins enabled on every route")
    parser.add_argument("--without-key-auth", action="store_true",
                        help="omit the key-auth plugins (keep consumers and credentials)")
    parser.add_argument("--service-url", help="routes proxy to one service at this URL")
    parser.add_argument("--message", help="request-termination message")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    generated = write_config(spec_from_args(args), args.output)
    print(json.dumps(generated.describe()))


if __name__ == "__main__":
    main()
