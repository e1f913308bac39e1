"""The one place the version is written: ``vecenv.__version__`` re-exports it, and pyproject.toml
reads it from here at build time ([tool.setuptools.dynamic]), so a wheel, an editable install and
a source checkout agree. Its own module so that any module can name it without importing the
package's top level (which would be an import cycle)."""

__version__ = "0.1.0"
