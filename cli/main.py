"""The ``ttrain`` command line: plan, train and (as the hardware lands) verify and build."""

import argparse
import os
import sys


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ttrain",
        description="ttrain: train tensor-compressed transformers on an FPGA accelerator "
                    "(golden model, RTL simulation, U50 flow).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from . import commands
    commands.register(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError) as exc:
        print(f"ttrain {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
