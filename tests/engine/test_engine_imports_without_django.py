"""The engine is a plain library: importing it never pulls in Django."""

import subprocess
import sys


def test_it_imports_every_engine_module_without_django():
    code = (
        "import sys, pkgutil, importlib, engine\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'django' or name.startswith('django.'):\n"
        "            raise ImportError('engine must not import django')\n"
        "sys.meta_path.insert(0, Block())\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'engine.'):\n"
        "    importlib.import_module(m.name)\n"
        "assert not any(k.startswith('django') for k in sys.modules)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
