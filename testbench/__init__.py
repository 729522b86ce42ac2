"""ttrain.testbench"""
