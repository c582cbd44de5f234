"""A scheduler_perf workload read from upstream's YAML: the test case and workload named in a
``<area>/performance-config.yaml`` of the ``k8s.io/kubernetes`` module, its parameters (with
``--param`` overrides), its ops as :class:`Step` s and sequence ops, checked for what this runner
reads (``benchmarks/scheduler_perf.py`` runs them; its docstring lists the opcodes). A key not
read, a templated file where one object is read or a bad parameter is a
:class:`~benchmarks.scheduler_perf_objects.WorkloadError` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from benchmarks.scheduler_perf_claims import AllocateClaims, alloc_op
from benchmarks.scheduler_perf_objects import (
    AnyObject,
    Churn,
    ResourceDriver,
    WorkloadError,
    any_object,
    churn_op,
    flag,
    known_keys,
    resource_driver,
)
from benchmarks.scheduler_perf_sequence import (
    Barrier,
    DeletePods,
    StartMetrics,
    StopMetrics,
    UpdateAny,
    barrier_op,
    delete_op,
    start_op,
    stop_op,
    update_op,
)
from benchmarks.scheduler_perf_steady import parse_duration
from benchmarks.scheduler_perf_templates import ObjectTemplate, TemplateError, load_template
from benchmarks.scheduler_perf_volumes import (
    NodeAllocatable,
    Volumes,
    allocatable_strategy,
    volumes_of,
)
from common.kube import RESOURCE_CLAIMS
from devcluster.binaries import KUBERNETES_VERSION, _go, _go_env, _module_download

#: Where the test cases are in the ``k8s.io/kubernetes`` module.
PERF_DIR = "test/integration/scheduler_perf"


@dataclass(frozen=True, slots=True)
class TurnNodes:
    """A ``createNodes`` op after a pod op or a metrics/barrier op: its Nodes are made in each
    scheduler's turn at that point, named from index :attr:`first` on, and deleted after the
    turn (EventHandlingNodeAdd/NodeUpdate: a second turn must see them added again)."""

    step: Step
    first: int  # the first Node's index (after the workload's other Nodes)


SequenceOp = Barrier | DeletePods | StartMetrics | StopMetrics | UpdateAny | TurnNodes


@dataclass(frozen=True, slots=True)
class Step:
    template: ObjectTemplate  # rendered per object: index among the step's ``count``
    count: int
    measured: bool = False
    namespace: str | None = None  # createPods' own (else one of the run's)
    label: tuple[str, tuple[str, ...]] | None = None  # createNodes: key, values round robin
    steady_s: float | None = None  # createPods with steadyState: for how long (seconds)
    skip_wait: bool = False  # createPods' skipWaitToCompletion: a barrier waits for them
    #: createPods without a namespace: upstream's name for its own (``namespace-<op index>``),
    #: which deletePods and barrier name
    alias: str | None = None
    volumes: Volumes | None = None  # createPods' persistent volume and claim templates
    allocatable: NodeAllocatable | None = None  # createNodes' nodeAllocatableStrategy


@dataclass(frozen=True, slots=True)
class Workload:
    case: str
    name: str
    nodes: tuple[Step, ...]
    pods: tuple[Step, ...]
    namespaces: tuple[str, ...] = ()  # createNamespaces'
    churn: tuple[Churn, ...] = ()
    drivers: tuple[ResourceDriver, ...] = ()  # createResourceDriver's
    objects: tuple[AnyObject, ...] = ()  # createAny's, made at the start of each turn
    allocate: tuple[AllocateClaims, ...] = ()  # allocResourceClaims', after the createAny ones
    #: createNamespaces' namespaceTemplatePath: name → the template's labels
    namespace_labels: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    #: barrier, deletePods, start/stopCollectingMetrics, updateAny: each with the number of
    #: createPods steps before it (they run in the workload's order)
    sequence: tuple[tuple[int, SequenceOp], ...] = ()

    @property
    def dra(self) -> bool:
        """Its pods need kube-controller-manager's resourceclaim controller (as upstream runs)."""
        return bool(self.drivers or self.objects or self.allocate)

    def in_order(self) -> list[Step | SequenceOp]:
        """The createPods steps and the :attr:`sequence` ops, in the workload's order."""
        out: list[Step | SequenceOp] = []
        ops = list(self.sequence)
        for i, step in enumerate(self.pods):
            while ops and ops[0][0] <= i:
                out.append(ops.pop(0)[1])
            out.append(step)
        return out + [op for _, op in ops]

    @property
    def window(self) -> StartMetrics | None:
        """The startCollectingMetrics op, when it (not a createPods step) opens the measured
        phase."""
        return next((op for _, op in self.sequence if isinstance(op, StartMetrics)), None)

    @property
    def steady(self) -> Step | None:
        """The measured createPods step when it runs in a steady state."""
        return next((s for s in self.pods if s.measured and s.steady_s is not None), None)

    @property
    def node_count(self) -> int:
        """The Nodes made once, before the first turn."""
        return sum(s.count for s in self.nodes)

    @property
    def turn_nodes(self) -> tuple[TurnNodes, ...]:
        """The createNodes ops made in each turn (see :class:`TurnNodes`)."""
        return tuple(op for _, op in self.sequence if isinstance(op, TurnNodes))

    @property
    def measured_pods(self) -> int:
        """The collectMetrics step's pods, or those that the startCollectingMetrics op's
        window will count: created inside it, in its namespaces, matching its selector."""
        window = self.window
        if window is None:
            return sum(s.count for s in self.pods if s.measured)
        total, inside = 0, False
        for item in self.in_order():
            inside = (inside or item is window) and not isinstance(item, StopMetrics)
            if inside and isinstance(item, Step) and self.counted(item, window):
                total += item.count
        return total

    @staticmethod
    def counted(step: Step, window: StartMetrics) -> bool:
        """Whether the window counts ``step``'s pods (its namespace and labels)."""
        labels = (step.template.render(0, step.count).get("metadata") or {}).get("labels") or {}
        return (step.namespace or step.alias) in window.namespaces and all(
            labels.get(k) == v for k, v in window.selector
        )


def module_dir() -> Path:
    """The ``k8s.io/kubernetes`` module of the control plane's version (downloaded if needed)."""
    with tempfile.TemporaryDirectory() as scratch:
        info = _module_download(
            _go(), f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", cwd=Path(scratch), env=_go_env()
        )
    return Path(info["Dir"])


def _template(path: Path) -> ObjectTemplate:
    try:
        return load_template(path)
    except TemplateError as exc:
        raise WorkloadError(str(exc)) from None


def _plain(path: Path) -> dict[str, Any]:
    """A file read whole (one object for every use): a templated one is refused."""
    template = _template(path)
    if template.templated:
        raise WorkloadError(f"{path}: a templated file ({{{{…}}}}) is not read here")
    return template.render()


def _count(op: Mapping[str, Any], params: Mapping[str, Any], where: str) -> int:
    if "count" in op:
        return int(op["count"])
    param = str(op.get("countParam", ""))
    if not param.startswith("$") or param[1:] not in params:
        raise WorkloadError(f"{where}.countParam: {param!r} is not a parameter of this workload")
    return int(params[param[1:]])


def load_workload(
    config: Path, case: str, workload: str, overrides: Mapping[str, ParamValue] | None = None
) -> Workload:
    """One workload of one test case of a scheduler_perf ``performance-config.yaml``;
    ``overrides``: parameters replaced (or added)."""
    cases = yaml.safe_load(config.read_text()) or []
    found = next((c for c in cases if c.get("name") == case), None)
    if found is None:
        known = ", ".join(str(c.get("name")) for c in cases)
        raise WorkloadError(f"test case {case!r} is not in {config} (it has: {known})")
    chosen = next((w for w in found.get("workloads") or () if w.get("name") == workload), None)
    if chosen is None:
        known = ", ".join(str(w.get("name")) for w in found.get("workloads") or ())
        raise WorkloadError(f"{case}: no workload {workload!r} (it has: {known})")
    params = _override(chosen.get("params") or {}, overrides or {})
    base = config.parent
    default_pod = found.get("defaultPodTemplatePath")
    nodes: list[Step] = []
    pods: list[Step] = []
    namespaces: list[str] = []
    namespace_labels: dict[str, Mapping[str, str]] = {}
    churn: list[Churn] = []
    drivers: list[ResourceDriver] = []
    objects: list[AnyObject] = []
    allocate: list[AllocateClaims] = []
    sequence: list[tuple[int, SequenceOp]] = []
    for i, (where, op) in enumerate(_unrolled(found.get("workloadTemplate") or (), params, case)):
        opcode = op.get("opcode")
        if opcode == "createNodes":
            known_keys(op, NODE_KEYS, "createNodes", where)
            count = _count(op, params, where)
            path = op.get("nodeTemplatePath") or _shared(base, "node-default.yaml")
            step = Step(_template(base / path), count, label=_label(op, where))
            step = dataclasses.replace(step, allocatable=allocatable_strategy(op, where))
            if not pods and not sequence:  # before the first pod: they stay for every turn
                nodes.append(step)
                continue
            if step.allocatable is not None:
                raise WorkloadError(
                    f"{where}.nodeAllocatableStrategy: not read on a createNodes op after a pod "
                    "or metrics op (its Nodes are made in each turn)"
                )
            first = sum(s.count for s in nodes) + sum(
                made.step.count for _, made in sequence if isinstance(made, TurnNodes)
            )
            sequence.append((len(pods), TurnNodes(step, first)))
        elif opcode == "createNamespaces":
            prefix = op.get("prefix")
            if not isinstance(prefix, str) or not prefix:
                raise WorkloadError(f"{where}.prefix: {prefix!r} is not a namespace prefix")
            made = [f"{prefix}-{n}" for n in range(_count(op, params, where))]
            namespaces += made
            path = op.get("namespaceTemplatePath")
            if path is not None:
                labels = _namespace_labels(base / str(path), f"{where}.namespaceTemplatePath")
                namespace_labels |= dict.fromkeys(made, labels)
        elif opcode == "createPods":
            # Neither: upstream's makeBasePod (testutils.MakePodSpec), which pod-default.yaml is.
            path = op.get("podTemplatePath") or default_pod or _shared(base, "pod-default.yaml")
            count = _count(op, params, where)
            measured = flag(op, "collectMetrics", where)
            skip = flag(op, "skipWaitToCompletion", where)
            ns = op.get("namespace")
            steady = _steady(op, params, where)
            if steady is not None and not measured:
                raise WorkloadError(f"{where}.steadyState: read only with collectMetrics: true")
            if skip and (measured or steady is not None):
                raise WorkloadError(
                    f"{where}.skipWaitToCompletion: true with "
                    f"{'collectMetrics' if measured else 'steadyState'}: true (upstream refuses it)"
                )
            alias = None if ns else f"namespace-{i}"  # upstream's name for the op's namespace
            step = Step(_template(base / path), count, measured, ns, steady_s=steady)
            pv, pvc = (
                _plain(base / str(op[k])) if op.get(k) else None
                for k in ("persistentVolumeTemplatePath", "persistentVolumeClaimTemplatePath")
            )
            volumes = volumes_of(pv, pvc, where)
            pods.append(dataclasses.replace(step, skip_wait=skip, alias=alias, volumes=volumes))
        elif opcode == "churn":
            paths = op.get("templatePaths") or []
            if not isinstance(paths, list) or not paths:
                raise WorkloadError(f"{where}.templatePaths: {paths!r}: give at least one file")
            churn.append(churn_op([_plain(base / p) for p in paths], op, where))
        elif opcode == "createResourceDriver":
            if _window_open(sequence):
                raise WorkloadError(
                    f"{where}: createResourceDriver inside startCollectingMetrics … "
                    "stopCollectingMetrics: upstream times its ResourceSlices' creation until the "
                    "in-process scheduler's informer holds every one (dra.go: "
                    "draManager.ResourceSlices()), with no pod scheduled — what neither "
                    "scheduler's process shows from outside; this runner publishes the slices "
                    "before the schedulers start"
                )
            drivers.append(resource_driver(op, params, where))
        elif opcode == "createAny":
            path = op.get("templatePath")
            if not isinstance(path, str) or not path:
                raise WorkloadError(f"{where}.templatePath: {path!r} is not a file")
            count = _count(op, params, where) if "count" in op or "countParam" in op else 1
            obj = any_object(_template(base / path), op, where, count)
            if obj.resource is RESOURCE_CLAIMS and obj.namespace in {a.namespace for a in allocate}:
                raise WorkloadError(
                    f"{where}: ResourceClaims created in {obj.namespace!r} after its "
                    "allocResourceClaims (this runner allocates after every createAny)"
                )
            objects.append(obj)
        elif opcode == "allocResourceClaims":
            allocate.append(alloc_op(op, where))
        elif opcode == "barrier":
            sequence.append((len(pods), barrier_op(op, where)))
        elif opcode == "deletePods":
            sequence.append((len(pods), delete_op(op, where)))
        elif opcode == "startCollectingMetrics":
            sequence.append((len(pods), start_op(op, where)))
        elif opcode == "stopCollectingMetrics":
            sequence.append((len(pods), stop_op(op, where)))
        elif opcode == "updateAny":
            path = op.get("templatePath")
            if not isinstance(path, str) or not path:
                raise WorkloadError(f"{where}.templatePath: {path!r} is not a file")
            count = _count(op, params, where) if "count" in op or "countParam" in op else 1
            sequence.append((len(pods), update_op(_template(base / path), op, count, where)))
        else:
            raise WorkloadError(f"{where}.opcode: {opcode!r} is not read by this runner")
    work = Workload(
        case,
        workload,
        tuple(nodes),
        tuple(pods),
        tuple(namespaces),
        tuple(churn),
        tuple(drivers),
        tuple(objects),
        tuple(allocate),
        namespace_labels,
        tuple(sequence),
    )
    _check_order(work, f"{case}/{workload}")
    return work


def _window_open(sequence: Sequence[tuple[int, SequenceOp]]) -> bool:
    """Whether a startCollectingMetrics op is open (not yet stopped) at this point."""
    ops = [op for _, op in sequence if isinstance(op, StartMetrics | StopMetrics)]
    return bool(ops) and isinstance(ops[-1], StartMetrics)


def _shared(base: Path, name: str) -> Path:
    """``scheduler_perf/templates/<name>`` seen from a config's folder (``misc/``, or one
    deeper: ``dra/devicetaints/``): upstream's built-in node and pod, which these files are."""
    for folder in (base, *base.parents):
        if (folder / "templates" / name).is_file() and folder != base:
            return folder / "templates" / name
    return base / ".." / "templates" / name  # load_template names it: no such template


def _unrolled(
    template: Sequence[Mapping[str, Any]], params: Mapping[str, Any], case: str
) -> list[tuple[str, Mapping[str, Any]]]:
    """The ops, each with where it is written, a ``createPodSets`` op unrolled into its
    ``count`` createPods ops in ``<namespacePrefix>-<i>``, as upstream's runner unrolls it (the
    op indexes that name the namespaces are the unrolled list's)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for i, op in enumerate(template):
        where = f"{case}.workloadTemplate[{i}]"
        if op.get("opcode") != "createPodSets":
            out.append((where, op))
            continue
        known_keys(op, POD_SET_KEYS, "createPodSets", where)
        prefix, inner = op.get("namespacePrefix"), op.get("createPodsOp")
        if not isinstance(prefix, str) or not prefix:
            raise WorkloadError(f"{where}.namespacePrefix: {prefix!r} is not a namespace prefix")
        if not isinstance(inner, dict) or inner.get("opcode", "createPods") != "createPods":
            raise WorkloadError(f"{where}.createPodsOp: {inner!r} is not a createPods op")
        if "namespace" in inner:
            raise WorkloadError(
                f"{where}.createPodsOp.namespace: {inner['namespace']!r}: each set has its own "
                f"({prefix}-<i>)"
            )
        for n in range(_count(op, params, where)):
            copy = {**inner, "opcode": "createPods", "namespace": f"{prefix}-{n}"}
            out.append((f"{where}.createPodsOp (set {n})", copy))
    return out


def _namespace_labels(path: Path, where: str) -> Mapping[str, str]:
    """A namespace template's labels (upstream reads it whole and sets the name; nothing else
    in it matters to a scheduler)."""
    body = _plain(path)
    if body.get("kind") != "Namespace":
        raise WorkloadError(f"{where}: {path.name} is a {body.get('kind')!r}, not a Namespace")
    labels = (body.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, dict):
        raise WorkloadError(f"{where}: {path.name}: metadata.labels {labels!r} is not a map")
    return {str(k): str(v) for k, v in labels.items()}


def _check_order(work: Workload, where: str) -> None:
    """One measured phase — a createPods step with collectMetrics, or a
    startCollectingMetrics…stopCollectingMetrics pair — and every namespace a barrier,
    deletePods or the window names made by an op before it."""
    starts = [op for _, op in work.sequence if isinstance(op, StartMetrics)]
    stops = [op for _, op in work.sequence if isinstance(op, StopMetrics)]
    measured_in = {s.namespace for s in work.pods if s.measured}
    if sum(1 for s in work.pods if s.measured) > 1:
        raise WorkloadError(f"{where}: collectMetrics on several createPods ops")
    if len(starts) > 1 or len(stops) != len(starts):
        raise WorkloadError(
            f"{where}: {len(starts)} startCollectingMetrics and {len(stops)} "
            "stopCollectingMetrics: this runner measures one phase"
        )
    if starts and measured_in:
        raise WorkloadError(
            f"{where}: collectMetrics on a createPods op and startCollectingMetrics: this "
            "runner measures one phase"
        )
    if not starts and not measured_in:
        raise WorkloadError(f"{where}: no createPods step with collectMetrics")
    if starts and not work.measured_pods:
        raise WorkloadError(
            f"{where}: startCollectingMetrics (namespaces {list(starts[0].namespaces)}) counts "
            "no pod created before stopCollectingMetrics: nothing to measure"
        )
    known = set(work.namespaces)
    opened = False
    for item in work.in_order():
        if isinstance(item, Step):
            known.add(item.namespace or item.alias or "")
            continue
        if isinstance(item, StopMetrics) and not opened:
            raise WorkloadError(f"{where}: stopCollectingMetrics before startCollectingMetrics")
        opened = opened or isinstance(item, StartMetrics)
        named = (
            item.namespaces
            if isinstance(item, Barrier)
            else (item.namespace,)
            if isinstance(item, DeletePods)
            else ()
        )
        for ns in named:
            if ns not in known:
                raise WorkloadError(
                    f"{where}: {type(item).__name__} names namespace {ns!r}, which no op "
                    f"before it made ({', '.join(sorted(known)) or 'none'})"
                )


#: The keys of a ``createNodes`` op this runner reads (not upstream's uniqueNodeLabelStrategy).
POD_SET_KEYS = frozenset({"opcode", "count", "countParam", "namespacePrefix", "createPodsOp"})
NODE_KEYS = frozenset(
    {
        "opcode",
        "count",
        "countParam",
        "nodeTemplatePath",
        "labelNodePrepareStrategy",
        "nodeAllocatableStrategy",
    }
)
#: The keys of a ``createPods`` op this runner reads (all upstream's).
POD_KEYS = frozenset(
    {
        "opcode",
        "skipWaitToCompletion",
        "persistentVolumeTemplatePath",
        "persistentVolumeClaimTemplatePath",
        "count",
        "countParam",
        "podTemplatePath",
        "namespace",
        "collectMetrics",
        "steadyState",
        "steadyStateParam",
        "duration",
        "durationParam",
    }
)


def _param(op: Mapping[str, Any], key: str, params: Mapping[str, Any], where: str) -> Any:
    """``op[key]``, or the workload parameter ``op[key + "Param"]`` names (``$name``)."""
    ref = op.get(f"{key}Param")
    if ref is None:
        return op.get(key)
    if not isinstance(ref, str) or not ref.startswith("$") or ref[1:] not in params:
        raise WorkloadError(f"{where}.{key}Param: {ref!r} is not a parameter of this workload")
    return params[ref[1:]]


def _steady(op: Mapping[str, Any], params: Mapping[str, Any], where: str) -> float | None:
    """createPods' steady-state duration in seconds, or None when it creates its pods once."""
    known_keys(op, POD_KEYS, "createPods", where)
    steady = _param(op, "steadyState", params, where)
    if steady is None or steady is False:
        return None
    if steady is not True:
        raise WorkloadError(f"{where}.steadyState: {steady!r} is not true or false")
    duration = parse_duration(_param(op, "duration", params, where), f"{where}.duration")
    if duration <= 0:
        raise WorkloadError(f"{where}.duration: {duration:g} s: a steady state needs more than 0")
    return duration


def _label(op: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...]] | None:
    strategy = op.get("labelNodePrepareStrategy")
    if strategy is None:
        return None
    key, values = strategy.get("labelKey"), strategy.get("labelValues") or []
    if not isinstance(key, str) or not key or not values:
        raise WorkloadError(f"{where}.labelNodePrepareStrategy: needs labelKey and labelValues")
    if any(k != "labelKey" and k != "labelValues" for k in strategy):
        raise WorkloadError(f"{where}.labelNodePrepareStrategy: only labelKey/labelValues read")
    return key, tuple(str(v) for v in values)


#: A workload parameter as upstream's YAML types them: a count, true/false, a Go duration.
ParamValue = int | bool | str
_KINDS: Final = {int: "a count", bool: "true/false", str: "a duration"}


def parse_params(items: Sequence[str]) -> dict[str, ParamValue]:
    """``name=value`` pairs (``--param``) as workload parameters: a count (``initNodes=500``),
    ``true``/``false`` (``steadyState=false``) or a Go duration (``duration=30s``) — the kinds
    upstream's performance-config.yaml files use."""
    out: dict[str, ParamValue] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise WorkloadError(f"--param {item!r}: expected name=value, e.g. initNodes=500")
        out[name] = _param_value(name, value)
    return out


def _param_value(name: str, value: str) -> ParamValue:
    if value.isdigit():
        return int(value)
    if value in ("true", "false"):
        return value == "true"
    try:
        parse_duration(value, f"--param {name}")
    except WorkloadError:
        raise WorkloadError(
            f"--param {name}={value!r}: expected a count (500), true/false or a duration (10s)"
        ) from None
    return value


def _override(params: Mapping[str, Any], overrides: Mapping[str, ParamValue]) -> dict[str, Any]:
    """The workload's parameters with ``overrides``: each of the kind the workload gives it."""
    out = dict(params)
    for name, value in overrides.items():
        if name in params and type(value) is not type(params[name]):
            kind = _KINDS.get(type(params[name]), type(params[name]).__name__)
            raise WorkloadError(
                f"--param {name}={value!r}: this workload's {name} is {kind}, "
                f"not {_KINDS[type(value)]} (it has {params[name]!r})"
            )
        out[name] = value
    return out
