#!/bin/sh
# Makes the benchmark venv, .bench-venv/ beside .venv/: ptowsp (editable) plus the peers it is timed
# against and the exporters that write real models. The package never imports any of them; only
# benchmarks/ and the model-export script do.
#   sh benchmarks/peers.sh            # then: .bench-venv/bin/python benchmarks/<name>.py
set -e
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.bench-venv
test -x $VENV/bin/python || $PYTHON -m venv $VENV
$VENV/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
# torch and torchvision pinned as a pair (a torchvision built for another torch fails to import);
# onnxscript for torch's dynamo exporter; halide and numba for the image and streaming benchmarks
$VENV/bin/python -m pip install --quiet --disable-pip-version-check \
    'torch==2.14.1' 'torchvision==0.29.1' onnxscript onnxruntime halide numba
$VENV/bin/python -c "import torch, torchvision, onnxruntime, onnxscript, halide, numba; print('bench venv:', torch.__version__, torchvision.__version__, 'onnxruntime', onnxruntime.__version__)"
