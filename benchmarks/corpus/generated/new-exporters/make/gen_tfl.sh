#!/bin/sh
# Keras models to TFLite (tensorflow-cpu 2.21), then tflite2onnx 0.4.1, each in a venv of its own:
#   TF=/path/to/tf-venv/bin/python TFL=/path/to/tflite2onnx-venv/bin/python sh gen_tfl.sh
set -e
here=$(dirname "$0")
"$TF" "$here/make_keras_tflite.py"
"$TFL" "$here/gen_tfl.py"
