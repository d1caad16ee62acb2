"""Every command names a point or a variant with bench/points.py's labeler, and none with a label
of its own: a real CPU run (a copy and gloo collectives at one and two ranks, so the scaling
section has a family), then what the run itself, xferbench-summary, xferbench-doctor,
xferbench-compare (against the run's rows as another run) and xferbench-report print or write,
and the text of every figure xferbench-plot draws, are read for labels.

A label starts with a suite and one of its ops ('collectives all_reduce'), and goes on word by
word, one space apart, while the words are ones the labeler uses; it must then be one the
labeler gives for a row of the runs (a point, a variant, or a variant over the keys a table or
figure groups by). A suite and op alone are a table's cells, not a label.
"""
from __future__ import annotations

import html.parser
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.journal import RunWriter, write_json
from bench.points import AT_ONCE_KEYS, SCALING_KEYS, SERIES_KEYS, VARIANT_KEYS, point_label, variant_label
from bench.results import COLUMNS, Sample, load, read_meta
from conftest import env, xferbench_cmd

RUN = ("suite=links", "sizes.max=4KiB", "collectives.ops=[all_reduce]", "collectives.nproc=[1,2]", "timing.trials=2")


def labels_of(frame) -> set[str]:
    """Every label the labeler gives for the rows: each point, each variant over each key set."""
    rows = frame.astype({"world_size": int, "nnodes": int, "size_bytes": int}).to_dict("records")
    made = {point_label(row) for row in rows}
    for keys in (VARIANT_KEYS, SERIES_KEYS, AT_ONCE_KEYS, SCALING_KEYS):
        made |= {variant_label({k: row[k] for k in keys}) for row in rows}
    return made


def found_labels(text: str, starts: set[tuple[str, str]], vocabulary: set[str]) -> list[str]:
    """The labels in `text`: from a suite and its op, each next word one space on while it is a
    labeler's word."""
    # punctuation around a label ends it ('cuda:0' and 'host->host' keep theirs)
    text = re.sub(r"[:;,.)\]'\"]+(?=\s|$)|(?:^|(?<=\s))[(\['\"]+", "\n", text, flags=re.M)
    words = re.split(r"( +|\n)", text)   # the separators kept: a label's words are one space apart
    found = []
    for i in range(0, len(words) - 2, 2):
        if words[i + 1] != " " or (words[i], words[i + 2]) not in starts:
            continue
        end = i + 2
        while end + 2 < len(words) and words[end + 1] == " " and words[end + 2] in vocabulary:
            end += 2
        if end > i + 2:   # more than a suite and an op
            found.append("".join(words[i:end + 1]))
    return found


class _Text(html.parser.HTMLParser):
    """An HTML page's or an SVG figure's text, each element's apart, and its alt and title attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def handle_starttag(self, tag: str, attrs) -> None:
        self.parts += [value for name, value in attrs if name in ("alt", "title") and value]


def markup_text(path: Path) -> str:
    reader = _Text()
    reader.feed(path.read_text())
    return "\n".join(reader.parts)


def _run(*cmd: str, cwd: Path, extra_env: dict | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**env(), **(extra_env or {})})
    assert proc.returncode in (0, 1, 3), (cmd, proc.stderr)   # 1, 3: a verdict; never a crash or bad input
    return proc.stdout + proc.stderr


def _another_run(run: Path, where: Path) -> Path:
    """The run's rows and meta as a run of another id: a baseline the gate judges the run against."""
    frame = load([run])
    writer = RunWriter(where, where.name)
    writer.add_point([Sample(**{k: row[k] for k in COLUMNS}) for row in frame.to_dict("records")])
    writer.close()
    write_json(where / "meta.json", {**read_meta(run), "run_id": where.name})
    return where


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[dict[str, str], set[str]]:
    """What each command printed or wrote, as text by where it came from; the run's labels."""
    tmp = tmp_path_factory.mktemp("labels")
    results = tmp / "results"
    proc = subprocess.run(xferbench_cmd(results, *RUN), capture_output=True, text=True, cwd=tmp, env=env(),
                          timeout=300)
    assert proc.returncode in (0, 3), proc.stderr   # 3: too little judged on a CPU, as the doctor says
    texts = {"xferbench": proc.stdout + proc.stderr}
    (run,) = [p.parent for p in results.rglob("meta.json")]
    baseline = _another_run(run, tmp / "baseline")
    texts["summary"] = _run("bench.cli.summary", str(run), cwd=tmp)
    texts["doctor"] = _run("bench.cli.doctor", str(run), "--json", str(tmp / "doctor.json"), cwd=tmp)
    texts["doctor --json"] = (tmp / "doctor.json").read_text()
    texts["verdicts.json"] = (run / "verdicts.json").read_text()
    texts["compare"] = _run("bench.cli.compare", str(baseline), str(run), "--json", str(tmp / "gate.json"), cwd=tmp)
    texts["compare --json"] = (tmp / "gate.json").read_text()
    _run("bench.cli.report", str(results), "--out", str(tmp / "report.html"), cwd=tmp)
    texts["report"] = markup_text(tmp / "report.html")
    # figures as SVG with their text kept as text, not drawn as paths
    (tmp / "matplotlibrc").write_text("svg.fonttype: none\n")
    _run("bench.cli.plot", str(results), "--out", str(tmp / "plots"), "--format", "svg", cwd=tmp,
         extra_env={"MATPLOTLIBRC": str(tmp / "matplotlibrc")})
    for figure in sorted((tmp / "plots").glob("*.svg")):
        texts[f"figure {figure.name}"] = markup_text(figure)
    assert any(name.startswith("figure scaling") for name in texts)
    return texts, labels_of(load([run]))


def _json_strings(text: str) -> str:
    """A JSON file's strings, a line each (its escapes read)."""
    strings: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(text))
    return "\n".join(strings)


def test_every_label_printed_is_the_labelers(outputs):
    texts, made = outputs
    starts = {tuple(label.split(" ")[:2]) for label in made}
    vocabulary = {word for label in made for word in label.split(" ")}
    seen = {}
    for where, text in texts.items():
        text = _json_strings(text) if where.endswith("json") else text
        for label in found_labels(text, starts, vocabulary):
            assert label in made, f"{where} names {label!r}, which bench/points.py's labeler does not give"
            seen.setdefault(where, set()).add(label)
    # the labels are there to be read: the gate's points and families, the doctor's families, the
    # scaling family in the run's summary and the report
    assert {"compare", "compare --json", "doctor --json", "verdicts.json", "xferbench", "summary",
            "report"} <= set(seen), sorted(seen)
    scaling = variant_label({"suite": "collectives", "op": "all_reduce", "mode": "default", "backend": "gloo",
                             "api": "torch", "launch": "eager", "dtype": "float32"})
    assert scaling == "collectives all_reduce torch.distributed gloo eager float32"   # as the gate and doctor say
    assert scaling in seen["summary"] and scaling in seen["report"]


def test_a_label_of_its_own_making_is_found():
    made = {"collectives all_reduce torch.distributed gloo eager float32 n=2",
            "collectives all_reduce torch.distributed eager float32", "copy h2h pageable eager host->host 64B"}
    starts = {("collectives", "all_reduce"), ("copy", "h2h")}
    vocabulary = {word for label in made for word in label.split(" ")}
    text = ("| collectives all_reduce float32 eager torch | 1.0 |\n"       # scaling's former labeler
            "collectives all_reduce torch.distributed eager float32 (latency-bound)\n"
            " collectives all_reduce          default    gloo\n"            # a table's columns
            "copy h2h pageable eager host->host 64B: 5 GB/s")
    assert found_labels(text, starts, vocabulary) == [
        "collectives all_reduce float32 eager", "collectives all_reduce torch.distributed eager float32",
        "copy h2h pageable eager host->host 64B"]
