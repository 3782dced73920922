"""`python -m cudal2.cli ...`: the same as the `cudal2` command."""
from .app import main

main()
