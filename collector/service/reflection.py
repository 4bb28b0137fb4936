"""gRPC server reflection under both of its names: ``grpc.reflection.v1`` and
``grpc.reflection.v1alpha``.

Current tools (grpcurl, Postman, grpc_cli) ask ``grpc.reflection.v1`` first, but
grpcio-reflection (1.85) only ships ``v1alpha``. The two protocols are the same file
under two package names: identical messages with identical field numbers, so their wire
bytes are identical. This module registers the ``v1`` file descriptor (the ``v1alpha``
one renamed) in the default descriptor pool, so reflection can describe itself, and
serves ``grpc.reflection.v1.ServerReflection`` with grpcio-reflection's own servicer,
decoding and encoding with the ``v1alpha`` message classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FileDescriptor, ServiceDescriptor
from grpc_reflection.v1alpha import reflection as v1alpha_reflection
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha

from uldp.collector.service.handlers import add_service

__all__ = [
    "SERVICE_NAMES",
    "V1ALPHA_SERVICE_NAME",
    "V1_SERVICE_NAME",
    "add_reflection",
    "v1_file",
]

V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1ALPHA_SERVICE_NAME: str = v1alpha_reflection.SERVICE_NAME
#: both reflection services, for the list reflection itself returns
SERVICE_NAMES = (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)


def _renamed(type_name: str, old: str, new: str) -> str:
    """A fully qualified type reference moved from package ``old`` to ``new``."""
    prefix = f".{old}."
    return f".{new}." + type_name[len(prefix):] if type_name.startswith(prefix) else type_name


def _rename_fields(msgs: Sequence[descriptor_pb2.DescriptorProto], old: str, new: str) -> None:
    for msg in msgs:
        for f in msg.field:
            if f.type_name:
                f.type_name = _renamed(f.type_name, old, new)
        _rename_fields(msg.nested_type, old, new)


def v1_file_proto() -> descriptor_pb2.FileDescriptorProto:
    """``grpc/reflection/v1/reflection.proto``: the v1alpha file, package renamed."""
    fdp = descriptor_pb2.FileDescriptorProto()
    v1alpha.DESCRIPTOR.CopyToProto(fdp)
    old = fdp.package
    fdp.name, fdp.package = V1_FILE_NAME, V1_PACKAGE
    fdp.options.Clear()
    fdp.options.java_package = "io.grpc.reflection.v1"
    fdp.options.java_outer_classname = "ServerReflectionProto"
    fdp.options.java_multiple_files = True
    fdp.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    _rename_fields(fdp.message_type, old, V1_PACKAGE)
    for svc in fdp.service:
        for m in svc.method:
            m.input_type = _renamed(m.input_type, old, V1_PACKAGE)
            m.output_type = _renamed(m.output_type, old, V1_PACKAGE)
    return fdp


def v1_file() -> FileDescriptor:
    """The v1 reflection file in the default pool (added on first use)."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pass
    pool.AddSerializedFile(v1_file_proto().SerializeToString())
    return pool.FindFileByName(V1_FILE_NAME)


def _v1alpha_class(desc: Descriptor) -> Any:
    """The v1alpha message class with the same name (same wire format)."""
    return getattr(v1alpha, desc.name)


def add_reflection(server: Any, service_names: Sequence[str], *, aio: bool) -> None:
    """Serve reflection (v1 and v1alpha) listing ``service_names`` plus both
    reflection services themselves."""
    names = tuple(dict.fromkeys((*service_names, *SERVICE_NAMES)))
    servicer = (v1alpha_reflection.aio.ReflectionServicer(names) if aio
                else v1alpha_reflection.ReflectionServicer(names))
    v1_service: ServiceDescriptor = v1_file().services_by_name["ServerReflection"]
    add_service(server, servicer, v1alpha.DESCRIPTOR.services_by_name["ServerReflection"])
    add_service(server, servicer, v1_service, _v1alpha_class)
