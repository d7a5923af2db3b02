#!/usr/bin/env python3
"""Validates Specs/api.openapi.json against the OpenAPI 3.1 schema with
openapi-spec-validator (from PyPI). Exit 0 valid, 1 invalid, 3 validator unavailable."""
import sys

try:
    from openapi_spec_validator import validate
    from openapi_spec_validator.readers import read_from_filename
except ImportError:
    print("openapi-spec-validator is not installed (python3 -m pip install openapi-spec-validator)", file=sys.stderr)
    sys.exit(3)

path = sys.argv[1] if len(sys.argv) > 1 else "Specs/api.openapi.json"
spec, _ = read_from_filename(path)
try:
    validate(spec)
except Exception as error:  # the validator's own error types vary by version
    print(f"{path} is not a valid OpenAPI document: {error}", file=sys.stderr)
    sys.exit(1)
print(f"{path}: a valid OpenAPI {spec['openapi']} document with {len(spec['paths'])} paths")
