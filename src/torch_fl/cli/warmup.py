"""`torchfl warmup`: fill the compile cache from representative inputs, per shape compile time and
whether it hit the cache. Exit status: 0 warmed (or nothing to warm), 1 a torch-fl error, 2 usage."""

from __future__ import annotations

import argparse

from .args import add_device, add_report_files, command_parser


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="required")
    parser.add_argument("--shapes", nargs="+", metavar="SHAPE",
                        help="input shapes to warm, e.g. 8x64 4x32 (8x64,8x64 for two tensor inputs; "
                             "default: the factory's example inputs). Under dynamic_shapes = 'static' "
                             "each shape is its own graph; under 'jit' the second shape compiles a "
                             "dynamic graph that later shapes reuse")
    add_device(parser)
    parser.add_argument("--train", action="store_true",
                        help="warm a training step (forward and backward graphs) instead of inference")
    add_report_files(parser, html=False, schema="torchfl docs compile")


def run(args: argparse.Namespace) -> int:
    from ..analysis.model import load_model
    from ..compiler.warmup import warmup
    from ..report import progress
    from .output import emit

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    emit(warmup(spec, args.device, args.shapes, train=args.train), json_path=args.json)
    return 0
