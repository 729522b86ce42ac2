"""ttrain.platforms: the Alveo U50 (Amaranth platform, capacity) and Vitis RTL-kernel packaging."""

from .u50 import U50_CAPACITY, U50_PART, AlveoU50Platform
from .vitis import (U50_VITIS_PLATFORM, kernel_xdc, kernel_xml, package_xo_tcl,
                    vpp_link_config, write_kernel_tree)

__all__ = ["AlveoU50Platform", "U50_CAPACITY", "U50_PART", "U50_VITIS_PLATFORM", "kernel_xml",
           "kernel_xdc", "package_xo_tcl", "vpp_link_config", "write_kernel_tree"]
