"""``tf.train.Example`` and its parts as protobuf messages with TensorFlow's exact layout.

TF's ``tensorflow/core/example/{feature,example}.proto`` layout, described with protobuf's descriptor API and built into
classes at import (no ``protoc``, no generated code tied to one protobuf release): the bytes are TF's. The descriptors
live in a private pool, so TensorFlow imported in the same process cannot clash with them.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "tensorflow"
_Field = descriptor_pb2.FieldDescriptorProto


def _field(name: str, number: int, kind: int, *, repeated: bool = False, type_name: str = "",
           oneof_index: int | None = None) -> Any:
    field = _Field(name=name, number=number, type=kind,  # type: ignore[arg-type]
                   label=_Field.LABEL_REPEATED if repeated else _Field.LABEL_OPTIONAL)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof_index is not None:
        field.oneof_index = oneof_index
    return field


def _map_entry(name: str, value_type: str) -> Any:
    """The nested ``<Name>Entry`` message protoc writes for ``map<string, value_type>``."""
    entry = descriptor_pb2.DescriptorProto(name=name)
    entry.field.append(_field("key", 1, _Field.TYPE_STRING))
    entry.field.append(_field("value", 2, _Field.TYPE_MESSAGE, type_name=value_type))
    entry.options.map_entry = True
    return entry


def _feature_file() -> Any:
    """``feature.proto``: BytesList, FloatList, Int64List, Feature, Features, FeatureList, FeatureLists."""
    proto = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/feature.proto", package=_PACKAGE,
                                               syntax="proto3")
    for name, kind in (("BytesList", _Field.TYPE_BYTES), ("FloatList", _Field.TYPE_FLOAT),
                       ("Int64List", _Field.TYPE_INT64)):
        message = proto.message_type.add(name=name)
        message.field.append(_field("value", 1, kind, repeated=True))
        if kind != _Field.TYPE_BYTES:  # TF's [packed = true] (and jstype = JS_STRING on the int64s)
            message.field[0].options.packed = True
            if kind == _Field.TYPE_INT64:
                message.field[0].options.jstype = descriptor_pb2.FieldOptions.JS_STRING
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                                ("int64_list", "Int64List")), start=1):
        feature.field.append(_field(name, number, _Field.TYPE_MESSAGE, type_name=type_name, oneof_index=0))
    for outer, field_name, value_type in (("Features", "feature", "Feature"),
                                          ("FeatureLists", "feature_list", "FeatureList")):
        message = proto.message_type.add(name=outer)
        message.nested_type.append(_map_entry(field_name.title().replace("_", "") + "Entry", value_type))
        message.field.append(_field(field_name, 1, _Field.TYPE_MESSAGE, repeated=True,
                                    type_name=f"{outer}.{message.nested_type[0].name}"))
        if outer == "Features":
            feature_list = proto.message_type.add(name="FeatureList")
            feature_list.field.append(_field("feature", 1, _Field.TYPE_MESSAGE, repeated=True, type_name="Feature"))
    return proto


def _example_file() -> Any:
    """``example.proto``: Example and SequenceExample."""
    proto = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/example.proto", package=_PACKAGE,
                                               syntax="proto3", dependency=["tensorflow/core/example/feature.proto"])
    example = proto.message_type.add(name="Example")
    example.field.append(_field("features", 1, _Field.TYPE_MESSAGE, type_name="Features"))
    sequence = proto.message_type.add(name="SequenceExample")
    sequence.field.append(_field("context", 1, _Field.TYPE_MESSAGE, type_name="Features"))
    sequence.field.append(_field("feature_lists", 2, _Field.TYPE_MESSAGE, type_name="FeatureLists"))
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_feature_file())
_POOL.Add(_example_file())


def _message(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


BytesList = _message("BytesList")
FloatList = _message("FloatList")
Int64List = _message("Int64List")
Feature = _message("Feature")
Features = _message("Features")
FeatureList = _message("FeatureList")
FeatureLists = _message("FeatureLists")
Example = _message("Example")
SequenceExample = _message("SequenceExample")

__all__ = ["BytesList", "Example", "Feature", "FeatureList", "FeatureLists", "Features", "FloatList", "Int64List",
           "SequenceExample"]
