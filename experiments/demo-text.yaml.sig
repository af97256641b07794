{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI1NmFkNDVhYzA5ZWM3ODMzNWUxYzc5ZTU0NzMyNTE1MDZlZDgxMzFiNWUyOTFiY2VkZWFjYjM2MzgyZjk2Yjk5In0sIm5hbWUiOiJkZW1vLXRleHQueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "ygRCnn9FuaHWhA5yutihKIlSRLCpM7UBPsZdPCVeT/IpaFihNM57r6wKRG71cuCMzrAb+swRVTQYFi8n4fTKCg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
