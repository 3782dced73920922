"""`cudal2 registry`: placeholder until its issue lands (registers nothing)."""


def register(app) -> None:
    return None
