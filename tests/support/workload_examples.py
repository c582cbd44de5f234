"""The projects' own examples the workload controllers' tests run, as each project's
documentation or module writes them; only ``schedulerName: topos`` is added (``with_scheduler``)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from devcluster.workloads.build import Built
from devcluster.workloads.manifests import documents


def with_scheduler(pod_template: dict[str, Any], scheduler: str = "topos") -> dict[str, Any]:
    """``pod_template`` (a PodTemplateSpec) with ``spec.schedulerName`` set: the one line a user
    adds to a project's example to have Topos place its pods."""
    pod_template.setdefault("spec", {})["schedulerName"] = scheduler
    return pod_template


def _jobset(text: str) -> dict[str, Any]:
    """A JobSet example with every replicated Job's pods for Topos."""
    jobset: dict[str, Any] = yaml.safe_load(text)
    for replicated in jobset["spec"]["replicatedJobs"]:
        with_scheduler(replicated["template"]["spec"]["template"])
    return jobset


def _lws(text: str) -> dict[str, Any]:
    """A LeaderWorkerSet example with its workers (and its leader, when it has a template of its
    own) for Topos."""
    lws: dict[str, Any] = yaml.safe_load(text)
    template = lws["spec"]["leaderWorkerTemplate"]
    if "leaderTemplate" in template:
        with_scheduler(template["leaderTemplate"])
    with_scheduler(template["workerTemplate"])
    return lws


# JobSet's documentation example, as written there; only schedulerName is added below.
PARALLEL_JOBS = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: paralleljobs
spec:
  replicatedJobs:
  - name: workers
    template:
      spec:
        parallelism: 4
        completions: 4
        backoffLimit: 0
        template:
          spec:
            containers:
            - name: sleep
              image: busybox
              command:
                - sleep
              args:
                - 100s
  - name: driver
    template:
      spec:
        parallelism: 1
        completions: 1
        backoffLimit: 0
        template:
          spec:
            containers:
            - name: sleep
              image: busybox
              command:
                - sleep
              args:
                - 100s
"""


def paralleljobs() -> dict[str, Any]:
    return _jobset(PARALLEL_JOBS)


# The LWS sample as its module ships it; only schedulerName is added below.
LWS_SAMPLE = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  labels:
    app.kubernetes.io/name: leaderworkerset
    app.kubernetes.io/instance: leaderworkerset-sample
    app.kubernetes.io/part-of: lws
    app.kubernetes.io/managed-by: kustomize
    app.kubernetes.io/created-by: lws
  name: leaderworkerset-sample
spec:
  rolloutStrategy:
    rollingUpdateConfiguration:
      maxUnavailable: 1
    type: RollingUpdate
  replicas: 3
  leaderWorkerTemplate:
    size: 4
    restartPolicy: RecreateGroupOnPodRestart
    workerTemplate:
      spec:
        containers:
        - name: nginx
          image: nginxinc/nginx-unprivileged:1.27
          resources:
            limits:
              cpu: "100m"
            requests:
              cpu: "50m"
          ports:
          - containerPort: 8080
"""


def lws_sample() -> dict[str, Any]:
    return _lws(LWS_SAMPLE)


# KubeRay's config/samples/ray-cluster.sample.yaml, with a second worker group of one-GPU workers.
RAY_CLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
spec:
  rayVersion: '2.46.0'
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
          resources:
            limits:
              cpu: 1
              memory: 2G
            requests:
              cpu: 1
              memory: 2G
          ports:
          - containerPort: 6379
            name: gcs-server
          - containerPort: 8265
            name: dashboard
          - containerPort: 10001
            name: client
  workerGroupSpecs:
  - replicas: 1
    minReplicas: 1
    maxReplicas: 5
    groupName: workergroup
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
          resources:
            limits:
              cpu: 1
              memory: 1G
            requests:
              cpu: 1
              memory: 1G
  - replicas: 2
    minReplicas: 2
    maxReplicas: 4
    groupName: gpu-group
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0-gpu
          resources:
            limits:
              cpu: 1
              memory: 1G
              nvidia.com/gpu: 1
            requests:
              cpu: 1
              memory: 1G
              nvidia.com/gpu: 1
"""


def ray_cluster() -> dict[str, Any]:
    cluster: dict[str, Any] = yaml.safe_load(RAY_CLUSTER)
    with_scheduler(cluster["spec"]["headGroupSpec"]["template"])
    for group in cluster["spec"]["workerGroupSpecs"]:
        with_scheduler(group["template"])
    return cluster


RUNTIME_FILE = "manifests/base/runtimes/torch_distributed.yaml"

# A TrainJob as Trainer's documentation writes one: a runtime, nodes, resources per node.
TRAIN_JOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: pytorch-simple
spec:
  runtimeRef:
    name: torch-distributed
    apiGroup: trainer.kubeflow.org
    kind: TrainingRuntime
  trainer:
    numNodes: 2
    resourcesPerNode:
      limits:
        nvidia.com/gpu: 1
"""


def topos_runtime(built: Built) -> dict[str, Any]:
    """The module's torch-distributed runtime, namespaced, its pods for Topos."""
    (cluster_runtime,) = documents(built.module / RUNTIME_FILE)
    runtime = copy.deepcopy(cluster_runtime)
    runtime["kind"] = "TrainingRuntime"
    for replicated in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        with_scheduler(replicated["template"]["spec"]["template"])
    return runtime


# JobSet's exclusive placement as its documentation writes it (one Job per topology domain), the
# topology key a Topos leaf; a GPU per pod.
EXCLUSIVE_PLACEMENT = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: exclusive-placement
  annotations:
    alpha.jobset.sigs.k8s.io/exclusive-topology: topos.io/leaf
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          spec:
            containers:
            - name: sleep
              image: busybox
              command:
                - sleep
              args:
                - 100s
              resources:
                limits:
                  nvidia.com/gpu: 1
"""


def exclusive_placement() -> dict[str, Any]:
    return _jobset(EXCLUSIVE_PLACEMENT)


# JobSet's PyTorch example (examples/pytorch/cnn-mnist/mnist.yaml in JobSet's repository): four
# torchrun workers. Besides schedulerName, each worker asks for the node's 8 GPUs, as it would on a
# GPU cluster (the example as written asks for nothing, so any room would hold it).
PYTORCH = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: pytorch
spec:
  replicatedJobs:
  - name: workers
    template:
      spec:
        parallelism: 4
        completions: 4
        backoffLimit: 0
        template:
          spec:
            containers:
            - name: pytorch
              image: gcr.io/k8s-staging-jobset/pytorch-mnist:latest
              ports:
              - containerPort: 3389
              env:
              - name: MASTER_ADDR
                value: "pytorch-workers-0-0.pytorch"
              - name: MASTER_PORT
                value: "3389"
              - name: RANK
                valueFrom:
                  fieldRef:
                    fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
              - name: PYTHONUNBUFFERED
                value: "0"
              command:
              - bash
              - -xc
              - |
                printenv
                torchrun --rdzv_id=123 --nnodes=4 --nproc_per_node=1 --master_addr=$MASTER_ADDR \\
                  --master_port=$MASTER_PORT --node_rank=$RANK mnist.py --epochs=1 --log-interval=1
"""


def pytorch(gpus: int = 8) -> dict[str, Any]:
    jobset = _jobset(PYTORCH)
    for replicated in jobset["spec"]["replicatedJobs"]:
        for container in replicated["template"]["spec"]["template"]["spec"]["containers"]:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return jobset


# JobSet's failure-policy example (examples/failure-policy/max-restarts.yaml): a failed Job makes
# JobSet recreate every Job, up to three times (the command is left out: no kubelet runs it here).
MAX_RESTARTS = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: max-restarts
spec:
  failurePolicy:
    maxRestarts: 3
  replicatedJobs:
  - name: leader
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        completions: 1
        parallelism: 1
        template:
          spec:
            containers:
            - name: leader
              image: bash:latest
  - name: workers
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        completions: 2
        parallelism: 2
        template:
          spec:
            containers:
            - name: worker
              image: bash:latest
"""


def max_restarts() -> dict[str, Any]:
    return _jobset(MAX_RESTARTS)


# LWS's docs/examples/sample/lws-exclusive-placement.yaml as its module ships it (the nodes here
# carry its GKE node-pool label); only schedulerName is added below.
LWS_EXCLUSIVE = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: leaderworkerset-sample
  annotations:
    leaderworkerset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool
spec:
  replicas: 3
  leaderWorkerTemplate:
    size: 4
    restartPolicy: RecreateGroupOnPodRestart
    workerTemplate:
      spec:
        containers:
        - name: nginx
          image: nginxinc/nginx-unprivileged:1.27
          resources:
            limits:
              cpu: "100m"
            requests:
              cpu: "50m"
          ports:
          - containerPort: 8080
"""


def lws_exclusive() -> dict[str, Any]:
    return _lws(LWS_EXCLUSIVE)


# LWS's docs/examples/vllm/GPU/lws.yaml (multi-node vLLM: Llama 3.1 405B, tensor parallel 8 ×
# pipeline parallel 2), the LeaderWorkerSet as its module ships it (its Service left out); only
# schedulerName is added below. Each pod asks for a whole 8-GPU node with 1124Gi of memory.
VLLM = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 2
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        labels:
          role: leader
      spec:
        containers:
          - name: vllm-leader
            image: vllm/vllm-openai:latest
            env:
              - name: HUGGING_FACE_HUB_TOKEN
                value: $HUGGING_FACE_HUB_TOKEN
            command:
              - sh
              - -c
              - "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader
                 --ray_cluster_size=$(LWS_GROUP_SIZE);
                 python3 -m vllm.entrypoints.openai.api_server --port 8080
                 --model meta-llama/Llama-3.1-405B-Instruct --tensor-parallel-size 8
                 --pipeline_parallel_size 2"
            resources:
              limits:
                nvidia.com/gpu: "8"
                memory: 1124Gi
                ephemeral-storage: 800Gi
              requests:
                ephemeral-storage: 800Gi
                cpu: 125
            ports:
              - containerPort: 8080
            readinessProbe:
              tcpSocket:
                port: 8080
              initialDelaySeconds: 15
              periodSeconds: 10
            volumeMounts:
              - mountPath: /dev/shm
                name: dshm
        volumes:
        - name: dshm
          emptyDir:
            medium: Memory
            sizeLimit: 15Gi
    workerTemplate:
      spec:
        containers:
          - name: vllm-worker
            image: vllm/vllm-openai:latest
            command:
              - sh
              - -c
              - "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker
                 --ray_address=$(LWS_LEADER_ADDRESS)"
            resources:
              limits:
                nvidia.com/gpu: "8"
                memory: 1124Gi
                ephemeral-storage: 800Gi
              requests:
                ephemeral-storage: 800Gi
                cpu: 125
            env:
              - name: HUGGING_FACE_HUB_TOKEN
                value: $HUGGING_FACE_HUB_TOKEN
            volumeMounts:
              - mountPath: /dev/shm
                name: dshm
        volumes:
        - name: dshm
          emptyDir:
            medium: Memory
            sizeLimit: 15Gi
"""


def vllm(size: int = 2) -> dict[str, Any]:
    """The vLLM example; ``size``: pods per group (the example's 2, or more nodes per model)."""
    lws = _lws(VLLM)
    lws["spec"]["leaderWorkerTemplate"]["size"] = size
    return lws
