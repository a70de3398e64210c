"""The type stubs shipped in the package (lattn/_lattn.pyi, lattn/py.typed) name exactly
what the extension module exports, class by class (regenerate them with
scripts/gen_python_stubs.py after changing a binding)."""

import ast
import inspect
import pathlib

import lattn
import lattn._lattn as module

PACKAGE = pathlib.Path(lattn.__file__).resolve().parent
STUB_DUNDERS = {"__init__", "__eq__", "__hash__", "__repr__", "__str__", "__len__", "__getitem__", "__iter__",
                "__dlpack__", "__dlpack_device__", "__enter__", "__exit__", "__call__", "__bool__"}


def stub_tree():
    path = pathlib.Path(lattn.__file__).parent / "_lattn.pyi"  # next to the package, as installed
    assert path.is_file(), f"{path} is not shipped"
    assert (pathlib.Path(lattn.__file__).parent / "py.typed").is_file()
    return ast.parse(path.read_text())


def module_names():
    return {n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n))}


def stub_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return names


def class_members(cls):
    # (__hash__ = None, set by Python next to __eq__, is "unhashable", not a member)
    return {a for a, v in cls.__dict__.items() if (not a.startswith("_") or a in STUB_DUNDERS) and v is not None}


def test_stubs_name_every_export_and_nothing_else():
    tree = stub_tree()
    assert stub_names(tree) == module_names()


def test_stub_classes_have_the_modules_members():
    tree = stub_tree()
    stubs = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name, node in stubs.items():
        cls = getattr(module, name)
        if issubclass(cls, BaseException):
            continue
        members = {b.name for b in node.body if isinstance(b, ast.FunctionDef)}
        members |= {b.target.id for b in node.body if isinstance(b, ast.AnnAssign)}
        assert members == class_members(cls), name


def test_every_stub_function_is_typed():
    tree = stub_tree()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            assert node.returns is not None, node.name
