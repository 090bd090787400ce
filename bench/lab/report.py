"""Markdown: the run's report.md, and the generated block of docs/benchmarks.md.

The docs block sits between `<!-- performance-lab:begin -->` and
`<!-- performance-lab:end -->`. Inside it each scenario has its own marked block stamped
with its date, commit and command, so a run of one scenario replaces only that block;
the run header, the goals table and "where Strait loses" are rebuilt from all blocks.
Image links are written as `IMG/name.png` and resolved per destination.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .registry import Goal, Rendered

BEGIN, END = "<!-- performance-lab:begin -->", "<!-- performance-lab:end -->"
BLOCK = re.compile(r"<!-- lab:scenario (\S+) -->\n(.*?)<!-- /lab:scenario \1 -->\n", re.S)
GOALS = re.compile(r"<!-- lab-goals: (.*?) -->")


def fmt(value, digits: int = 0, suffix: str = "") -> str:
    """Thousands separators, fixed digits; '–' for missing values."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}{suffix}"


def percent(value: float | None) -> str:
    """A share (0..1) as a whole percentage; '–' for missing values."""
    return f"{value * 100:.0f}%" if value is not None else "–"


def contender_row(name: str, summary: dict) -> list:
    """One contender's row of a cost table: RPS mean and range, p99 (median), CPU µs per
    request, how busy the gateway's core was, errors and non-2xx answers."""
    cpu = summary["cpu_us_per_request"]["mean"]
    return [name, fmt(summary["rps"]["mean"]), f"{fmt(summary['rps']['min'])} – {fmt(summary['rps']['max'])}",
            fmt(summary["p99_us"]["median"]), fmt(cpu, 1) if cpu else "–",
            percent(summary.get("gateway_core_busy", {}).get("mean")), summary["errors"] + summary["non_2xx"]]


CONTENDER_HEADER = ["system", "RPS mean", "RPS min – max", "p99 µs (median)", "gateway CPU µs/req",
                    "gateway core busy", "errors / non-2xx"]


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def ratio_table(ratios: dict[str, dict]) -> str:
    """The within-round ratios (label -> key -> {mean, min, max}) as a table: RPS, CPU per
    request and p99 where measured."""
    rows = []
    for label, by_key in ratios.items():
        for key, what in (("rps", "RPS"), ("cpu_us_per_request", "CPU per request"), ("p99_us", "p99")):
            if key in by_key and by_key[key]["mean"] is not None:
                rows.append([f"{label} {what}", fmt(by_key[key]["mean"], 3),
                             f"{fmt(by_key[key]['min'], 3)} – {fmt(by_key[key]['max'], 3)}"])
    return table(["ratio", "mean", "range"], rows)


def layout_goal(scenario: str, direct: dict) -> list[Goal]:
    """The layout check of a cost scenario: direct RPS at least 1.5x the gateway's without
    plugins (below that the load generator's core, not the gateway, limits the RPS)."""
    if direct["mean"] is None:
        return []
    valid = direct["mean"] >= 1.5
    return [Goal(f"{scenario} layout: direct RPS / gateway RPS", ">= 1.5", f"{direct['mean']:.2f}", valid,
                 "" if valid else "below 1.5 the load generator's core, not the gateway, limits the RPS",
                 kind="layout")]


def met_text(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not measured"}[met]


def header_markdown(meta: dict) -> str:
    machine, layout, tools = meta["machine"], meta["layout"], meta["tools"]
    quick = " (quick smoke run: short loads, numbers are indicative only)" if meta.get("quick") else ""
    return (f"Measured **{meta['date']}** at commit `{meta['commit']}` with "
            f"`{meta['command']}`{quick}.\n\n"
            f"- Machine: {machine['nproc']} cores ({machine['cpu_model']}), "
            f"{machine['memory_gib']} GiB, {machine['os']}, kernel {machine['kernel']}.\n"
            f"- Layout: {layout['description']}.\n"
            f"- Tools: wrk `{tools['wrk']}`; h2load `{tools['h2load']}`; nginx `{tools['nginx']}`; "
            f"Envoy `{tools['envoy']}`.\n"
            f"- Strait: {meta.get('strait_build', 'build not recorded')}.\n"
            f"- Load average (1 min) before the run: {meta.get('load_average_at_start', '?')}; after: "
            f"{meta.get('load_average_at_end', '?')} (the lab itself keeps about 2 busy at the end; "
            "more before the run means other work shared the cores).\n")


def scenario_block(name: str, title: str, meta: dict, rendered: Rendered) -> str:
    goals = json.dumps([{**goal.__dict__, "scenario": name} for goal in rendered.goals])
    stamp = f"_Measured {meta['date']} at `{meta['commit']}` with `{meta['command']}`._\n\n"
    return (f"<!-- lab:scenario {name} -->\n### {title}\n\n{stamp}{rendered.markdown.rstrip()}\n\n"
            f"<!-- lab-goals: {goals} -->\n<!-- /lab:scenario {name} -->\n")


def goals_markdown(blocks: dict[str, str]) -> str:
    goals = []
    for block in blocks.values():
        for found in GOALS.findall(block):
            goals.extend(json.loads(found))
    if not goals:
        return ""
    rows = [[g["scenario"], g["goal"], g["target"], g["measured"],
             "**invalid layout**" if g.get("invalid") else met_text(g["met"])]
            for g in goals if g.get("kind", "goal") in ("goal", "layout")]
    # A layout check that failed is about the machine, not Strait: it is said apart.
    losses = [g for g in goals if g["met"] is False and g.get("kind") != "layout"]
    text = "### Goals\n\n" + table(["scenario", "goal", "target", "measured", "status"], rows)
    text += "\n**Where Strait loses or misses a goal (from these numbers):**\n\n"
    text += "".join(f"- {g['scenario']}: {g['goal']} — {g['measured']} (target {g['target']})"
                    f"{'; ' + g['note'] if g.get('note') else ''}\n" for g in losses) or "- nowhere in this run.\n"
    layouts = [g for g in goals if g["met"] is not True and g.get("kind") == "layout"]
    text += "".join(f"- layout, {g['scenario']}: {g['goal']} — {g['measured']} (needs {g['target']}): "
                    "RPS goals of that protocol are marked invalid, CPU per request is the comparison\n"
                    for g in layouts)
    notes = [g for g in goals if g["met"] is not False and g.get("note") and g.get("kind", "goal") == "goal"
             and not g.get("invalid")]
    text += "".join(f"- note, {g['scenario']}: {g['goal']}: {g['note']}\n" for g in notes)
    return text + "\n"


def assemble(meta: dict, blocks: dict[str, str]) -> str:
    return (f"{BEGIN}\n<!-- generated by bench/run; edit bench/lab/report.py, not this block -->\n"
            f"### Latest run\n\n{header_markdown(meta)}\n{goals_markdown(blocks)}{''.join(blocks.values())}{END}\n")


def write_run_report(out_dir: Path, meta: dict, blocks: dict[str, str]) -> Path:
    text = "# Strait performance lab report\n\n" + assemble(meta, blocks).replace("](IMG/", "](")
    path = out_dir / "report.md"
    path.write_text(text)
    return path


def update_docs(doc: Path, meta: dict, blocks: dict[str, str], plots: list[Path]) -> None:
    """Replace this run's scenario blocks in `doc`, keep the others, copy plots to doc/img."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    existing: dict[str, str] = {}
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        inner, after = rest.split(END, 1)
        existing = {name: f"<!-- lab:scenario {name} -->\n{body}<!-- /lab:scenario {name} -->\n"
                    for name, body in BLOCK.findall(inner)}
    else:
        before, after = text.rstrip("\n") + "\n\n## Performance lab\n\n", ""
    merged = {**existing, **blocks}
    image_dir = doc.parent / "img"
    image_dir.mkdir(parents=True, exist_ok=True)
    for plot in plots:
        shutil.copyfile(plot, image_dir / plot.name)
    block = assemble(meta, merged).replace("](IMG/", "](img/")
    after = after.lstrip("\n")
    doc.write_text(before + block + ("\n" + after if after else ""))
