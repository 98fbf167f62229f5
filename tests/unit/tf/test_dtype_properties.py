"""tf.DType's properties and tf.function's introspection, as TF 2.21 answers them (recorded from TF)."""

from __future__ import annotations

import pytest

import stratagem.tf as tf

# name -> (is_unsigned, is_numeric, base_dtype, real_dtype), printed by TF 2.21.
_TF_2_21 = {
    "bool": (False, False, "bool", "bool"),
    "uint8": (True, True, "uint8", "uint8"),
    "int32": (False, True, "int32", "int32"),
    "float32": (False, True, "float32", "float32"),
    "string": (False, False, "string", "string"),
    "complex64": (False, True, "complex64", "float32"),
}


@pytest.mark.parametrize("name", sorted(_TF_2_21))
def test_dtype_properties_match_tf(name: str) -> None:
    dtype = tf.as_dtype(name)
    assert (dtype.is_unsigned, dtype.is_numeric, dtype.base_dtype.name, dtype.real_dtype.name) == _TF_2_21[name]


def test_function_has_one_concrete_function_and_never_traces() -> None:
    double = tf.function(lambda x: x * 2)
    assert double.get_concrete_function(tf.constant(3))(tf.constant(4)).item() == 8
    assert double.experimental_get_tracing_count() == 0  # TF counts graph traces; nothing is traced here
