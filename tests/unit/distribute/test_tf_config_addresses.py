"""TF_CONFIG addresses that would fail far from their cause are refused where they are read."""

from __future__ import annotations

import json

import pytest

from stratagem.distribute.cluster import TFConfigClusterResolver
from stratagem.errors import ConfigurationError


def _resolve(address: str) -> TFConfigClusterResolver:
    config = {"cluster": {"worker": [address, "h2:2222"]}, "task": {"type": "worker", "index": 0}}
    return TFConfigClusterResolver({"TF_CONFIG": json.dumps(config)})


def test_address_with_protocol_is_refused_with_the_plain_form() -> None:
    with pytest.raises(ConfigurationError, match=r"protocol 'grpc://'.*Write 'h1:2222'.*Received"):
        _resolve("grpc://h1:2222")


def test_address_with_whitespace_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match=r"contains whitespace.*'h1:2222'.*Received: cluster\['worker'\]\[0\]=' h1:2222'"):
        _resolve(" h1:2222")
    assert _resolve("h1:2222").master_addr == "h1"
