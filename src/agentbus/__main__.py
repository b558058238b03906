"""``python -m agentbus``: the command line."""

from agentbus.cli import main

main()
