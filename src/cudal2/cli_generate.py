"""`cudal2 generate`: placeholder until its issue lands (registers nothing)."""


def register(app) -> None:
    return None
