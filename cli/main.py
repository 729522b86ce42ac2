"""The ``ttrain`` command line: plan, train and (as the hardware lands) verify and build."""

import argparse
import os
import sys

# Errors caused by the user's input or files: one line on stderr, exit code 2, no traceback.
# Commands check their flags and paths up front and raise ValueError (see ``commands.check_*``);
# the OSErrors are a safety net for paths that change under a running command, and
# FloatingPointError is a diverged training run (its message says which flag to change).
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError,
               NotADirectoryError, PermissionError, FloatingPointError)


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
    except USER_ERRORS as exc:
        message = " ".join(str(exc).split())        # one line, whatever the exception held
        print(f"ttrain {args.command}: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
