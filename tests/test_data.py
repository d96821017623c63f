"""The bundled demo data is the unchanged TFX taxi sample."""
import hashlib

from tests.conftest import TAXI_CSV


def test_bundled_taxi_sample_is_unchanged():
  with open(TAXI_CSV, "rb") as f:
    assert hashlib.sha256(f.read()).hexdigest() == \
        "cdaf0b5931442ef47693f408f25a37af710aca23fccb90a78f00930e89548805"
