"""Exceptions the compiled core raises that Python code catches by class.

They live here, in plain Python, so that naming them doesn't load the core,
whose Go runtime starts as it loads (README: fork). The core looks them up
here when it loads.
"""


class SendLimitError(ValueError):
    """A response message over ``grpc.max_send_message_length``, refused by
    the operation that sent it (``respond``, ``send_message`` or ``finish``
    on a front made with ``raise_send_limit=True``, as ``server()`` and
    ``aio.server()`` make theirs). Go has ended the call with
    RESOURCE_EXHAUSTED, after what was sent before that message."""
