"""ansible-test's pip bootstrap, without its download (make sanity installs it into ansible-test's cache).

``ansible-test sanity`` makes a virtual environment per test and bootstraps pip into it by running a
``get-pip.py`` downloaded from ansible's CI file server, which this project's machines do not reach;
it runs a cached copy instead when one is there, with pip's arguments (``pip==24.2 --no-setuptools
--no-wheel`` and pip's options). This one installs the interpreter's bundled pip (ensurepip) and
keeps it (a pip pin asks for a release the package index may not hold; the bundled one installs the
tests' requirements as well), and writes the pip settings of the environment that ran ``make sanity``
(``pip_settings.json`` beside this file: the index, its certificate, the constraints; ansible-test
starts its commands with a cleared environment) into the new environment's own ``pip.conf``, which
its later installs read.
"""

import ensurepip
import json
import os
import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")
SETTINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip_settings.json")

ensurepip.bootstrap()
if os.path.exists(SETTINGS):
    with open(SETTINGS) as handle:
        settings = json.load(handle)
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as handle:
        handle.write("[global]\n" + "".join(f"{key} = {value}\n" for key, value in sorted(settings.items())))
asked = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY and not a.startswith("-") and not a.startswith("pip==")]
if asked:
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *asked]))
