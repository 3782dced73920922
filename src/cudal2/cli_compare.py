"""`cudal2 compare`: placeholder until its issue lands (registers nothing)."""


def register(app) -> None:
    return None
