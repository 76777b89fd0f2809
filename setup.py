"""Build hook: the wheel and sdist ship the checkout's templates/, site-configs/ and jobs/ inside the package.

The folders stay at the top of the repository (the design); the mapping below installs them as
hpctrain/templates, hpctrain/site_configs and hpctrain/example_jobs, which hpctrain.spec.resources loads.
"""

from setuptools import find_packages, setup

DATA_PACKAGES = {
    "hpctrain.templates": "templates",
    "hpctrain.site_configs": "site-configs",
    "hpctrain.example_jobs": "jobs",
}

setup(
    packages=[*find_packages(include=["hpctrain", "hpctrain.*"]), *DATA_PACKAGES],
    package_dir=DATA_PACKAGES,
)
