"""A PEP 517 build backend in the standard library, so `pip install ./python` needs no download.

It builds a pure-Python wheel of the mapagg package (and an sdist of this folder).
"""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME, VERSION = "mapagg", "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = f"{NAME}-{VERSION}"

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Write mapagg jobs in Python (the streaming contract) and drive a cluster over its HTTP API
License: Apache-2.0
Requires-Python: >=3.8
"""

WHEEL = """Wheel-Version: 1.0
Generator: mapagg_build
Root-Is-Purelib: true
Tag: py3-none-any
"""

ENTRY_POINTS = """[console_scripts]
mapagg = mapagg.cli:main
"""


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{DIST}-py3-none-any.whl"
    files = []
    pkg = os.path.join(HERE, NAME)
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                files.append((f"{NAME}/{fn}", f.read()))
    info = f"{DIST}.dist-info"
    files += [(f"{info}/METADATA", METADATA.encode()), (f"{info}/WHEEL", WHEEL.encode()),
              (f"{info}/entry_points.txt", ENTRY_POINTS.encode())]
    record = "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files:
            z.writestr(p, d)
        z.writestr(f"{info}/RECORD", record)
    return name


def build_sdist(sdist_directory, config_settings=None):
    name = f"{DIST}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for item in ("pyproject.toml", "README.md", NAME, "_build", "tests"):
            t.add(os.path.join(HERE, item), arcname=f"{DIST}/{item}",
                  filter=lambda ti: None if "__pycache__" in ti.name else ti)
        info = tarfile.TarInfo(f"{DIST}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return name
