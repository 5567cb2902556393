"""ASCII digit checks for text that arrives from the network or a config file.

`str.isdigit()` accepts "¹²" (then `int()` raises) and "١٢٣" (then `int()` accepts it): a header, a
GPU index or a port must be plain 0-9.
"""


def is_ascii_uint(text: str, max_len: int = 12) -> bool:
    return 0 < len(text) <= max_len and text.isascii() and text.isdigit()
