from kit.cli import run_cli

run_cli()
