"""scheduler_perf's templated object files rendered as upstream's runner renders them
(``benchmarks/scheduler_perf_templates.py``): ``{{.Index}}`` and the functions its files call,
with Go's arithmetic; constructs this runner does not read refused naming the file and the
construct; upstream's SchedulingWithResourceClaim case read with its claims and pods made per
index (five pods to a claim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.scheduler_perf_objects import WorkloadError
from benchmarks.scheduler_perf_templates import TemplateError, load_template, render
from devcluster.binaries import BinariesUnavailable


@pytest.mark.parametrize(
    ("text", "index", "count", "want"),
    [
        ("test-claim-{{.Index}}", 7, 10, "test-claim-7"),
        ("n-{{ .Index }}-of-{{ .Count }}", 3, 20, "n-3-of-20"),
        ("test-claim-{{DivideInt .Index 5}}", 14, 100, "test-claim-2"),  # truncated
        ("gpu-{{Mod .Index 25}}", 57, 100, "gpu-7"),
        ("{{ DivideInt 30000 .Count }}", 0, 7, "4285"),
        (
            "{{AddInt .Index 1 2}} {{SubtractInt .Index 10}} {{MultiplyInt .Index 3}}",
            4,
            5,
            "7 -6 12",
        ),
        ("{{DivideFloat .Index 4}} {{AddFloat 0.5 .Index}}", 10, 1, "2.5 10.5"),
        ("{{Mod -7 3}}", 0, 1, "-1"),  # Go's %: the sign of the dividend
        ("no actions at all", 0, 1, "no actions at all"),
    ],
)
def test_actions_render_as_go_renders_them(text: str, index: int, count: int, want: str) -> None:
    assert render(text, index, count) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{{.Index | printf "%03d"}}', r"x\.yaml: \{\{\.Index \| printf .*is not read"),
        ("{{if .Index}}a{{end}}", r"x\.yaml: \{\{if \.Index\}\}: 'if' is not a function"),
        ("{{Pow .Index 2}}", r"'Pow' is not a function this runner reads \(AddFloat, "),
        ("{{.Name}}", r"'\.Name' is not a field here \(\.Index, \.Count\)"),
        ("{{DivideInt .Index}}", r"DivideInt takes 2 arguments"),
        ("{{Mod .Index 0}}", r"\{\{Mod \.Index 0\}\}: integer divide by zero"),
        ("{{- .Index}}", r"\{\{- \.Index\}\} is not read by this runner"),
        ("{{Mod .Index x}}", r"argument 'x' is not \.Index, \.Count or a number"),
    ],
)
def test_constructs_not_read_are_named(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(text, 0, 1, "x.yaml")


def test_a_file_is_refused_when_read_not_when_run(tmp_path: Path) -> None:
    bad = tmp_path / "claim.yaml"
    bad.write_text("kind: ResourceClaim\nmetadata:\n  name: c-{{.Index | len}}\n")
    with pytest.raises(TemplateError, match=r"claim\.yaml: \{\{\.Index \| len\}\}"):
        load_template(bad)
    good = tmp_path / "good.yaml"
    good.write_text("kind: ResourceClaim\nmetadata:\n  name: c-{{.Index}}\n")
    template = load_template(good)
    assert template.templated
    assert [template.render(i, 3)["metadata"]["name"] for i in range(3)] == ["c-0", "c-1", "c-2"]
    plain = tmp_path / "plain.yaml"
    plain.write_text("kind: DeviceClass\nmetadata: {name: c}\n")
    assert load_template(plain).render(5, 9) == {"kind": "DeviceClass", "metadata": {"name": "c"}}


def test_a_churn_file_may_not_be_templated(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    (tmp_path / "node.yaml").write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n-{{.Index}}}\n"
    )
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: C\n  workloadTemplate:\n  - opcode: churn\n    mode: create\n"
        "    templatePaths: [node.yaml]\n"
        "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
        "    podTemplatePath: pod.yaml\n"
        "  workloads:\n  - name: w\n    params: {}\n"
    )
    with pytest.raises(WorkloadError, match=r"node\.yaml: a templated file .* is not read here"):
        workload_yaml.load_workload(config, "C", "w")


def test_claims_shared_by_five_pods_are_read_from_upstream_yaml() -> None:
    try:
        perf_dir = workload_yaml.module_dir() / workload_yaml.PERF_DIR
    except BinariesUnavailable as exc:
        pytest.skip(f"the k8s.io/kubernetes module is not available: {exc}")
    work = workload_yaml.load_workload(
        perf_dir / "dra" / "performance-config.yaml",
        "SchedulingWithResourceClaim",
        "5000pods_500nodes",
    )
    assert work.dra
    assert (work.node_count, work.measured_pods) == (500, 2500)
    claims = [o for o in work.objects if o.resource.kind == "ResourceClaim"]
    assert [(o.namespace, o.count) for o in claims] == [("init", 500), ("test", 500)]
    names = [claims[1].template.render(i, 500)["metadata"]["name"] for i in (0, 499)]
    assert names == ["test-claim-0", "test-claim-499"]
    measured = work.pods[1]
    refs = [
        measured.template.render(i, measured.count)["spec"]["resourceClaims"][0]
        for i in (0, 4, 5, 2499)
    ]
    assert [r["resourceClaimName"] for r in refs] == [
        "test-claim-0",
        "test-claim-0",
        "test-claim-1",
        "test-claim-499",
    ]
