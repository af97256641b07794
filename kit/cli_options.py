"""Options and output helpers shared by the commands of ``kit.cli`` and the command modules beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
trust_option = click.option(
    "--trust",
    "trust",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="allowed_signers file(s) that make up the trust policy, instead of ~/.config/kit/allowed_signers "
    "(repeatable). Nothing beside or above the content checked is ever trusted.",
)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
