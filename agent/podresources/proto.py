"""The kubelet PodResources v1 messages, declared in code.

The schema is ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (package ``v1``, service
``PodResourcesLister``). Declaring it here as a ``FileDescriptorProto`` keeps the build free of
``protoc``/grpcio-tools and of a generated module pinned to one protobuf runtime: the message
classes are made at import time by the installed protobuf, so they always match it. The schema is
small and stable (fields are only ever added); fields this declaration leaves out (dynamic
resources from DRA) are carried as unknown fields and ignored, which is what protobuf promises.
"""

from __future__ import annotations

from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE: Final = "v1"
SERVICE: Final = "v1.PodResourcesLister"

_T = descriptor_pb2.FieldDescriptorProto
_REPEATED = _T.LABEL_REPEATED
_OPTIONAL = _T.LABEL_OPTIONAL

# (message, [(field, number, type, label, message type or None)])
_MESSAGES: Final[tuple[tuple[str, tuple[tuple[str, int, int, int, str | None], ...]], ...]] = (
    ("NUMANode", (("ID", 1, _T.TYPE_INT64, _OPTIONAL, None),)),
    ("TopologyInfo", (("nodes", 1, _T.TYPE_MESSAGE, _REPEATED, "NUMANode"),)),
    (
        "ContainerDevices",
        (
            ("resource_name", 1, _T.TYPE_STRING, _OPTIONAL, None),
            ("device_ids", 2, _T.TYPE_STRING, _REPEATED, None),
            ("topology", 3, _T.TYPE_MESSAGE, _OPTIONAL, "TopologyInfo"),
        ),
    ),
    (
        "ContainerMemory",
        (
            ("memory_type", 1, _T.TYPE_STRING, _OPTIONAL, None),
            ("size", 2, _T.TYPE_UINT64, _OPTIONAL, None),
            ("topology", 3, _T.TYPE_MESSAGE, _OPTIONAL, "TopologyInfo"),
        ),
    ),
    (
        "ContainerResources",
        (
            ("name", 1, _T.TYPE_STRING, _OPTIONAL, None),
            ("devices", 2, _T.TYPE_MESSAGE, _REPEATED, "ContainerDevices"),
            ("cpu_ids", 3, _T.TYPE_INT64, _REPEATED, None),
            ("memory", 4, _T.TYPE_MESSAGE, _REPEATED, "ContainerMemory"),
        ),
    ),
    (
        "PodResources",
        (
            ("name", 1, _T.TYPE_STRING, _OPTIONAL, None),
            ("namespace", 2, _T.TYPE_STRING, _OPTIONAL, None),
            ("containers", 3, _T.TYPE_MESSAGE, _REPEATED, "ContainerResources"),
        ),
    ),
    ("ListPodResourcesRequest", ()),
    (
        "ListPodResourcesResponse",
        (("pod_resources", 1, _T.TYPE_MESSAGE, _REPEATED, "PodResources"),),
    ),
    ("AllocatableResourcesRequest", ()),
    (
        "AllocatableResourcesResponse",
        (
            ("devices", 1, _T.TYPE_MESSAGE, _REPEATED, "ContainerDevices"),
            ("cpu_ids", 2, _T.TYPE_INT64, _REPEATED, None),
            ("memory", 3, _T.TYPE_MESSAGE, _REPEATED, "ContainerMemory"),
        ),
    ),
    (
        "GetPodResourcesRequest",
        (
            ("pod_name", 1, _T.TYPE_STRING, _OPTIONAL, None),
            ("pod_namespace", 2, _T.TYPE_STRING, _OPTIONAL, None),
        ),
    ),
    (
        "GetPodResourcesResponse",
        (("pod_resources", 1, _T.TYPE_MESSAGE, _OPTIONAL, "PodResources"),),
    ),
)

# (method, request, response)
METHODS: Final = (
    ("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
    ("GetAllocatableResources", "AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
)


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="topos/podresources/v1/api.proto", package=PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES:
        msg = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fd = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name is not None:
                fd.type_name = f".{PACKAGE}.{type_name}"
    svc = f.service.add(name="PodResourcesLister")
    for method, request, response in METHODS:
        svc.method.add(
            name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}"
        )
    return f


_POOL: Final = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message_class(name: str) -> Any:
    """The generated class for ``v1.<name>``."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


ListPodResourcesRequest: Final = message_class("ListPodResourcesRequest")
ListPodResourcesResponse: Final = message_class("ListPodResourcesResponse")
AllocatableResourcesRequest: Final = message_class("AllocatableResourcesRequest")
AllocatableResourcesResponse: Final = message_class("AllocatableResourcesResponse")
GetPodResourcesRequest: Final = message_class("GetPodResourcesRequest")
GetPodResourcesResponse: Final = message_class("GetPodResourcesResponse")
PodResources: Final = message_class("PodResources")
ContainerResources: Final = message_class("ContainerResources")
ContainerDevices: Final = message_class("ContainerDevices")
ContainerMemory: Final = message_class("ContainerMemory")
TopologyInfo: Final = message_class("TopologyInfo")
NUMANode: Final = message_class("NUMANode")
