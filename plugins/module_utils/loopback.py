"""HTTP to the service on its own host, never through a proxy.

The modules speak to vLLM on a loopback address. urllib's default opener takes the proxies of the
environment (``http_proxy``) for every address that ``no_proxy`` does not name, loopback included, so
on a host with a proxy configured a request for ``http://127.0.0.1:8000/health`` would go to the
proxy. This opener has no proxy handler. Standard library only: the modules run it on the hosts.
"""

import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_loopback(request, timeout):
    """The answer to ``request`` (a URL or a ``urllib.request.Request``), as ``urllib.request`` gives it
    (``HTTPError`` for a status of 400 or more, ``URLError`` or ``OSError`` when nothing answers)."""
    return _OPENER.open(request, timeout=timeout)
