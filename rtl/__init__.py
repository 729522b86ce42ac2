"""ttrain.rtl"""
